"""One session against one adapter endpoint: the WebSocket (connection.py, readiness.py), the
Core's side of the `streameval/1` state machine (protocol_state.py), the two pacings
(pacing.py), the send path (sender.py, frame_chain.py, frame_messages.py, waiting.py), the
recording of every event in arrival order (recorder.py), why a session failed
(failures.py), and the driver that puts them together (driver.py).

May import: errors, store, frames, benchmark, streams, config.
"""
