"""One execution of one run: the engine (its core, its nodes, the child-run
nodes), what an execution is given and how it ends, the journal it replays,
the heartbeat of its lease and handing its run back to the queue.
"""
