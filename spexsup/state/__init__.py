"""The state and its ledger: the SQLite store, the event log, the maintenance
lease, and the ledger, the one writer of every state change."""
