//! Every placeholder form: `<id>`, `{id}`, fields, tuple fields, `self`, destructured
//! parameters, escapes, and a key with no placeholder.
use dlock_core::{Error, Locker, current_lock, distributed_lock};

fn key() -> String {
    current_lock().expect("inside the body").key().to_owned()
}

pub struct Order {
    id: u64,
    customer: Customer,
}

pub struct Customer {
    name: String,
}

#[distributed_lock(key = "angle:<id>", locker = Locker::memory())]
async fn angle(id: u64) -> Result<String, Error> {
    Ok(key())
}

#[distributed_lock(key = "brace:{id}", locker = Locker::memory())]
async fn brace(id: u64) -> Result<String, Error> {
    Ok(key())
}

#[distributed_lock(key = "order:<order.id>:<order.customer.name>", locker = Locker::memory())]
async fn fields(order: &Order) -> Result<String, Error> {
    Ok(key())
}

#[distributed_lock(key = "pair:<pair.0>-<pair.1>", locker = Locker::memory())]
async fn tuple_fields(pair: (u8, &str)) -> Result<String, Error> {
    Ok(key())
}

#[distributed_lock(key = "point:<x>,<y>", locker = Locker::memory())]
async fn destructured((x, y): (i32, i32)) -> Result<String, Error> {
    Ok(key())
}

#[distributed_lock(key = "esc:<<a>>{{b}}:<id>:{{<id>}}", locker = Locker::memory())]
async fn escapes(id: u64) -> Result<String, Error> {
    Ok(key())
}

#[distributed_lock(key = "nightly-report", locker = Locker::memory())]
async fn constant() -> Result<String, Error> {
    Ok(key())
}

#[distributed_lock(key = "raw:<id>", locker = Locker::memory())]
async fn raw_string(id: &str) -> Result<String, Error> {
    Ok(key())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(angle(1).await.unwrap(), "angle:1");
    assert_eq!(brace(2).await.unwrap(), "brace:2");
    let order = Order {
        id: 3,
        customer: Customer { name: "ann".into() },
    };
    assert_eq!(fields(&order).await.unwrap(), "order:3:ann");
    assert_eq!(tuple_fields((4, "x")).await.unwrap(), "pair:4-x");
    assert_eq!(destructured((5, -6)).await.unwrap(), "point:5,-6");
    assert_eq!(escapes(7).await.unwrap(), "esc:<a>{b}:7:{7}");
    assert_eq!(constant().await.unwrap(), "nightly-report");
    assert_eq!(raw_string("z").await.unwrap(), "raw:z");
}
