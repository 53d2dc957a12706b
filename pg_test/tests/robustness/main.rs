//! Robustness under concurrency that is easy to get wrong: older snapshots racing a drop,
//! lock ordering across capped queues and idempotency keys, and maintenance passes that must
//! not wait for each other.
//!
//! Each test was seen failing against the broken variant named in its comment
//! (`JQ_TEST_BREAK=<name>` installs it in the test's own database).

mod drops;
mod lock_order;
mod maintenance;
mod validation;
