-- name: listen_channel
LISTEN {channel_identifier};
