"""The routing target kind: a serving-cluster simulator and its evaluator."""
