"""Contract test suites for plug-ins, shipped with the package (they need pytest).

A kind's or proposer's own tests subclass a suite and supply fixtures only:

    from optimizer.testing.evaluators import EvaluatorContract

    class TestMyKind(EvaluatorContract):
        @pytest.fixture(scope="class")
        @classmethod
        def target(cls):
            return load_target(Path("targets/mine/x"), Path("."))

Every built-in kind and proposer runs them (tests/evaluators/test_contracts.py,
tests/optimizer/proposers/test_contracts.py).
"""
