//! The attribute builds every key of the shared template table (`data/key_template_cases.rs`)
//! as dlock-tower's `path_key` does.

use dlock_core::{Error, Locker, current_lock, distributed_lock};

macro_rules! key_template_cases {
    ($($name:ident: $template:literal => $expected:literal,)*) => {
        $(
            #[distributed_lock(key = $template, locker = locker)]
            async fn $name(locker: &Locker, id: &str, user: &str) -> Result<String, Error> {
                let _ = (id, user);
                Ok(current_lock().expect("inside the annotated fn").key().to_owned())
            }
        )*

        #[tokio::test]
        async fn the_attribute_builds_every_key_of_the_table() {
            let locker = Locker::memory();
            $(
                assert_eq!(
                    $name(&locker, "42", "ann").await.unwrap(),
                    $expected,
                    "template {:?}",
                    $template
                );
            )*
        }
    };
}

include!("data/key_template_cases.rs");
