-- A run's event cursor must never show a gap that fills later: bigserial values are taken
-- at insert, not at commit, so a reader could pass cursor 11 while 10 is still in flight.
-- Readers only see rows whose transaction is older than every transaction still running.
ALTER TABLE run_events ADD COLUMN IF NOT EXISTS txid xid8 NOT NULL DEFAULT pg_current_xact_id();
