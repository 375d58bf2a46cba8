"""Query functions: each takes a Session, never commits, and names its locking."""
