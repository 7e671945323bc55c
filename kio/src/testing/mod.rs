//! Test-only tools: the exhaustive waiter model checker.
