"""The clippy adapter: the guest argv (command.py), the toolchain probe (toolchain.py),
clippy's JSON message stream (parse.py), and what a finished run means (classify.py).

Pure host-side code: it is handed the bytes that came back from the guest and treats
them as hostile (bounded, validated, never printed raw)."""
