"""Trust and roll calls: challenges and their checks, the challenge desk, roll calls, trust states, transcripts."""
