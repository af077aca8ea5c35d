//! Placeholder library target so the end-to-end test package builds; the tests live in `e2e/`.
