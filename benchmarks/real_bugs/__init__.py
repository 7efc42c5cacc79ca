"""The real-bug bed: bugs users reported in this field's public trackers, reproduced on CPU in the
reporter's idiom, each with the thread's fix as its clean twin (`make real-bugs`, README)."""
