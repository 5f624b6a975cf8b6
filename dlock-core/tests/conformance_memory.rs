//! The conformance suite against the memory backend, with the backend type known statically
//! (`MemoryBackend`) and behind `Arc<dyn LockBackend>`.

use std::sync::Arc;

use dlock_core::backend::{LockBackend, MemoryBackend};
use dlock_core::conformance::{Expectations, Target};

async fn direct() -> Target<MemoryBackend> {
    let table = MemoryBackend::new();
    let expect = Expectations::of(&table);
    Target::new(
        move || {
            let client = table.clone();
            async move { Arc::new(client) }
        },
        expect,
    )
}

async fn dynamic() -> Target<dyn LockBackend> {
    let table = MemoryBackend::new();
    let expect = Expectations::of(&table);
    Target::new(
        move || {
            let client: Arc<dyn LockBackend> = Arc::new(table.clone());
            async move { client }
        },
        expect,
    )
}

dlock_core::conformance_tests!(memory_direct, direct());
dlock_core::conformance_tests!(memory_dyn, dynamic());
