-- Content-addressed transcript storage: items and large tool outputs live here, history holds refs.
CREATE TABLE IF NOT EXISTS blobs (
    digest      text PRIMARY KEY,
    body        text NOT NULL,
    size_bytes  integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A transcript is a chain of nodes; each node adds some item digests to its parent.
CREATE TABLE IF NOT EXISTS transcript_nodes (
    ref          text PRIMARY KEY,
    parent_ref   text REFERENCES transcript_nodes (ref),
    run_id       text NOT NULL,
    item_digests text[] NOT NULL,
    depth        integer NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS transcript_nodes_run_idx ON transcript_nodes (run_id);
