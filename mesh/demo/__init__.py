"""`mesh demo`'s machinery: the processes it runs, the events it follows, the summary.

The scenario itself (the team, its data and the scripted requests) is the repository's
``agents/demo_script.py``: the example agents are not installed with the library, so the
demo runs from a checkout (`mesh.demo.checkout`).
"""
