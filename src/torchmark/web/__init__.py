"""The shared leaderboard: ``torchmark board`` (app.py) and what ``torchmark submit`` shares
with it (strip.py). Needs ``pip install 'torchmark[server]'`` for the server."""
