//! [`VecMap`]: an ordered map for a handful of entries, kept as one sorted `Vec`.
//!
//! The checker holds a few maps per run in flight (a run has a few step keys). A `BTreeMap` allocates a whole leaf
//! of eleven slots for its first entry (some 1.7 KB for the checker's key states), so a thousand runs in flight
//! spread their state over megabytes that every step walks through. A sorted `Vec` holds the same entries in the
//! same order in a block sized to them.

use std::borrow::Borrow;

/// Entries sorted by key; lookups by binary search. Iterates in key order, as a `BTreeMap` would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VecMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap { entries: Vec::new() }
    }
}

impl<K: Ord, V> VecMap<K, V> {
    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &mut self.entries[i].1)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// The value under `key`, inserting `make()` first when there is none. The key is built (`to_key`) only then,
    /// so a lookup by a borrowed form never allocates an owned key for an entry that exists.
    pub fn get_or_insert_with<Q: Ord + ?Sized>(
        &mut self,
        key: &Q,
        to_key: impl FnOnce(&Q) -> K,
        make: impl FnOnce() -> V,
    ) -> &mut V
    where
        K: Borrow<Q>,
    {
        let i = match self.find(key) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (to_key(key), make()));
                i
            }
        };
        &mut self.entries[i].1
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// Values in key order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The same operations on a `VecMap` and a `BTreeMap` give the same answers and the same order.
    #[test]
    fn behaves_as_an_ordered_map() {
        let mut map: VecMap<String, u32> = VecMap::default();
        let mut model: BTreeMap<String, u32> = BTreeMap::new();
        // A fixed pseudo-random sequence of keys, with repeats.
        let mut x: u64 = 7;
        for _ in 0..500 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let key = format!("k{}", (x >> 33) % 40);
            *map.get_or_insert_with(key.as_str(), str::to_owned, || 0) += 1;
            *model.entry(key.clone()).or_insert(0) += 1;
            assert_eq!(map.get(key.as_str()), model.get(&key));
            assert!(!map.contains_key("absent"));
        }
        assert_eq!(map.len(), model.len());
        assert!(map.iter().map(|(k, v)| (k.clone(), *v)).eq(model.iter().map(|(k, v)| (k.clone(), *v))));
        assert!(map.values().eq(model.values()));
        *map.get_mut("k3").unwrap() = 99;
        assert_eq!(map.get("k3"), Some(&99));
        assert!(map.get_mut("nope").is_none());
        assert!(!map.is_empty() && VecMap::<u8, u8>::default().is_empty());
    }
}
