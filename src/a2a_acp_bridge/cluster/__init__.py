"""Several bridge replicas on one PostgreSQL state (A2A_DATABASE_URL): docs/scaling.md."""
