//! Worker client for jq. This crate is a placeholder: the client loop and the `jqctl`
//! command line arrive with their own issue. It owns no queue SQL; it will only call
//! `jq.*` functions with parameters.
