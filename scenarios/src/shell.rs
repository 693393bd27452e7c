//! Commands that flowsim prints for a person to paste (every `reproduce with:` line), quoted for a POSIX shell.
//!
//! A word is quoted only when the shell would otherwise change it, so the common lines (`--seed 1 --steps 2000`)
//! read as before. The quoting is POSIX single quotes, where every character but `'` stands for itself; a `'` is
//! written as `'\''` (close, an escaped quote, reopen). That is the whole rule, so it lives here rather than in a
//! dependency: a dozen lines, which `tests/cli_run.rs` checks against a real `sh`.

use std::borrow::Cow;

/// Is `c` a character that no POSIX shell treats specially anywhere in a word? (`~` and `=` are left out: a
/// leading `~` is expanded, and `NAME=value` in command position is an assignment.)
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':' | '@' | '+' | ',' | '%')
}

/// `word` as the shell must be given it to pass it on unchanged: as it is when every character is plain, otherwise
/// in single quotes (an empty word is `''`, so it is not lost).
pub fn quote(word: &str) -> Cow<'_, str> {
    if !word.is_empty() && word.chars().all(is_plain) {
        return Cow::Borrowed(word);
    }
    Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
}

/// The words as one command line, each quoted where it needs to be.
pub fn join<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    words.into_iter().map(quote).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_as_they_are() {
        for word in ["cargo", "--seed", "1", "canary", "/tmp/qa/h0.toml", "run-53", "a+b@c:d,e%f"] {
            assert!(matches!(quote(word), Cow::Borrowed(w) if w == word), "{word}");
        }
    }

    #[test]
    fn anything_else_is_single_quoted() {
        assert_eq!(quote("my scen;x.toml"), "'my scen;x.toml'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("~/x"), "'~/x'");
        assert_eq!(quote("$HOME"), "'$HOME'");
        assert_eq!(quote("é"), "'é'");
        assert_eq!(join(["run", "--scenario", "a b"]), "run --scenario 'a b'");
    }
}
