-- The channels a worker listens on: new claimable runs, cancels, resumable runs.

-- name: listen_channel
LISTEN {channel_identifier};

-- name: listen_cancel_channel
LISTEN {cancel_channel_identifier};

-- name: listen_resume_channel
LISTEN {resume_channel_identifier};
