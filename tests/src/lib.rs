//! Cross-crate harness: loopback clusters, process crash tests.
