"""Realtime: Server-Sent Events that follow a run, a tag or a batch (docs/architecture.md, Web).

- ``dispatcher.py``: one LISTEN connection per server process on the changes channel
  (sql/realtime/changes.sql), fanning each announced run id out to the streams that follow it;
- ``inbox.py``: what a stream follows (``Scope``) and its bounded inbox of changed run ids;
- ``slots.py``: the caps on open streams, per environment and for the whole server;
- ``stream.py``: one stream: its first state read once, then the runs it is told changed,
  re-read with a short pooled read, as ``status``, ``metadata`` and ``result`` events;
- ``tokens.py``: signed read-only tokens scoped to one run, tag or batch, for a browser.
"""
