"""The analysis stage: reading scored run folders and comparing them (paired statistics, pairing
by label, compare, the gate and its policy, TREC scoring, human review)."""
