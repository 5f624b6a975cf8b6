//! The lock directories a backend saw lately: the hint that picks a create's first request.
//!
//! A node goes into a directory that exists with one plain create. A directory that does not
//! exist yet (a fresh key: an order's id) would cost three — the create answered `NoNode`,
//! the `mkdir`, the create again — so a directory not seen lately is made together with the
//! node, in one multi. The hint is only ever a guess: when it is wrong (the directory was
//! reaped, or another client made it) the request it picked fails whole and the other one is
//! sent, one request more, never a wrong result.

use std::collections::HashSet;
use std::sync::Mutex;

/// Directories remembered in each of the two generations (so at most twice this in all).
const GENERATION: usize = 4096;

/// Directories seen lately, in two generations: when the newest is full it becomes the older
/// one and the oldest is forgotten — least recently seen first, at O(1) a call.
#[derive(Debug, Default)]
pub(super) struct KnownDirs {
    /// `[newest, older]`.
    generations: Mutex<[HashSet<String>; 2]>,
}

impl KnownDirs {
    /// Whether `dir` was seen lately (a plain create is then sent first).
    pub(super) fn contains(&self, dir: &str) -> bool {
        let generations = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        generations
            .iter()
            .any(|generation| generation.contains(dir))
    }

    /// `dir` exists: a node was created in it, or a create of it was refused as existing.
    pub(super) fn saw(&self, dir: &str) {
        let mut generations = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        if generations[0].contains(dir) {
            return;
        }
        if generations[0].len() >= GENERATION {
            generations[1] = std::mem::take(&mut generations[0]);
        }
        generations[0].insert(dir.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_lately_seen_and_forgets_the_oldest() {
        let dirs = KnownDirs::default();
        assert!(!dirs.contains("/a"));
        dirs.saw("/a");
        assert!(dirs.contains("/a"));
        for i in 0..GENERATION {
            dirs.saw(&format!("/n{i}"));
        }
        // `/a` is in the older generation now, still known; seen again, it is newest.
        assert!(dirs.contains("/a"));
        dirs.saw("/a");
        for i in 0..GENERATION - 1 {
            dirs.saw(&format!("/m{i}"));
        }
        assert!(dirs.contains("/a"), "seen lately: kept");
        assert!(!dirs.contains("/n0"), "two generations old: forgotten");
        let remembered = dirs
            .generations
            .lock()
            .unwrap()
            .iter()
            .map(HashSet::len)
            .sum::<usize>();
        assert!(remembered <= 2 * GENERATION, "{remembered}");
    }
}
