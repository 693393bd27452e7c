//! [`OneOrMore`]: a list that is almost always one entry long, with that entry held inline.
//!
//! A search term's objects in a fake and a key's created objects in the simulator's checker are one entry each
//! unless something went wrong (a duplicate). A `Vec` would allocate a heap block for every one of them; this holds
//! the first entry inline, so only a second entry allocates.

/// The first entry inline, the rest (if any) in a `Vec`. Entries keep the order they were added in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneOrMore<T> {
    first: T,
    more: Vec<T>,
}

impl<T> OneOrMore<T> {
    pub fn new(first: T) -> Self {
        OneOrMore { first, more: Vec::new() }
    }

    /// Appends `item` after the others.
    pub fn push(&mut self, item: T) {
        self.more.push(item);
    }

    /// The entry added first.
    pub fn first(&self) -> &T {
        &self.first
    }

    /// Every entry, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        std::iter::once(&self.first).chain(&self.more)
    }

    /// How many entries (at least one).
    pub fn len(&self) -> usize {
        1 + self.more.len()
    }

    /// Always false: there is at least one entry (here for the `len` convention).
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Adds `item` to `list`, making the list when it is the first.
pub fn push_or_start<T>(list: &mut Option<OneOrMore<T>>, item: T) {
    match list {
        Some(list) => list.push(item),
        None => *list = Some(OneOrMore::new(item)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_from_the_first_entry_on() {
        let mut list = None;
        push_or_start(&mut list, "a");
        let one = list.clone().unwrap();
        assert_eq!((one.len(), *one.first(), one.iter().copied().collect::<Vec<_>>()), (1, "a", vec!["a"]));
        push_or_start(&mut list, "b");
        push_or_start(&mut list, "c");
        let three = list.unwrap();
        assert_eq!((three.len(), *three.first()), (3, "a"));
        assert_eq!(three.iter().copied().collect::<Vec<_>>(), vec!["a", "b", "c"]);
        assert!(!three.is_empty());
    }
}
