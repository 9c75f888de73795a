"""Work on stored runs that needs no runtime: retention (prune), copying
between databases, the history export format and the replayer.
"""
