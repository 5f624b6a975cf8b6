//! Generic fns: type parameters, where clauses, lifetimes, `impl Trait` arguments, const
//! generics.
use std::fmt::Display;

use dlock_core::{Error, Locker, distributed_lock};

#[distributed_lock(key = "job:<name>", locker = Locker::memory())]
async fn run_job<N: Display>(name: N) -> Result<String, Error> {
    Ok(name.to_string())
}

#[distributed_lock(key = "item:<id>", locker = locker)]
async fn with_where<'a, T>(locker: &'a Locker, id: &'a T) -> Result<&'a T, Error>
where
    T: Display + Sync + ?Sized,
{
    Ok(id)
}

#[distributed_lock(key = "arg:<id>", locker = Locker::memory())]
async fn impl_arg(id: impl Display + Send) -> Result<String, Error> {
    Ok(format!("{id}"))
}

#[distributed_lock(key = "batch:<id>", locker = Locker::memory())]
async fn const_generic<const N: usize>(id: u64, items: [u8; N]) -> Result<usize, Error> {
    Ok(items.len() + id as usize)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(run_job("a").await.unwrap(), "a");
    assert_eq!(run_job(7).await.unwrap(), "7");
    let locker = Locker::memory();
    assert_eq!(with_where(&locker, "k").await.unwrap(), "k");
    assert_eq!(impl_arg(3.5).await.unwrap(), "3.5");
    assert_eq!(const_generic(1, [0; 3]).await.unwrap(), 4);
}
