"""LLM steps that run over a finished run folder: the Ragas judge (judge.py) and relevance labels
for the holes in the qrels (relevance.py)."""
