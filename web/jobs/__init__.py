"""Dispatched work (issue 44, docs/jobs.md): a relay takes CE jobs, places their tasks on proven nodes through
the map, checks every result and moves work off nodes that drop. rules.py and book.py are pure; desk.py is the
adapter over narrow ports (web/jobs/ports.py); job_store.py keeps jobs in their own SQLite file; endpoints.py
is HTTP."""
