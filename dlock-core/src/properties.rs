//! Settings shared by the crate's property tests (proptest).

use proptest::prelude::ProptestConfig;

/// `cases` random cases per property; a failure prints its minimal input, and nothing is
/// written into the source tree (no regression files).
pub(crate) fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}
