-- The channels a worker listens on: new claimable runs, cancels, resumable runs; and the one a
-- client waiting for a run from outside a handler listens on (wait_for_run).

-- name: listen_channel
LISTEN {channel_identifier};

-- name: listen_cancel_channel
LISTEN {cancel_channel_identifier};

-- name: listen_resume_channel
LISTEN {resume_channel_identifier};

-- name: listen_finished_channel
LISTEN {finished_channel_identifier};
