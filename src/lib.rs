//! End-to-end tests for fleet live in tests/.
