"""Storage: SQLAlchemy Core tables and the engine (SQLite WAL by default, portable SQL)."""
