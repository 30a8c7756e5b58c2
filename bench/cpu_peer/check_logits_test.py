#!/usr/bin/env python3
"""Offline tests of check_logits.py's comparison (no servers): python3 bench/cpu_peer/check_logits_test.py"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_logits as cl  # noqa: E402


def pos(tid, logprobs, with_ids=True):
    """A position choosing `tid`, top-5 = ids tid, tid+1, ... with the given logprobs."""
    top = [(tid + j if with_ids else None, f"t{tid + j}", lp) for j, lp in enumerate(logprobs)]
    return cl.Position(tid if with_ids else None, f"t{tid}", logprobs[0], top)


CLEAR = [-0.1, -2.5, -3.0, -3.5, -4.0]   # top-2 margin 2.4 > 10 x 0.1
CLOSE = [-0.70, -0.72, -3.0, -3.5, -4.0]  # margin 0.02: a tie-break


class Compare(unittest.TestCase):
    def test_identical_passes(self):
        seq = [pos(10, CLEAR), pos(20, CLOSE), pos(30, CLEAR)]
        r = cl.compare_prompt(seq, seq, 0.1)
        self.assertEqual(r["failures"], [])
        self.assertEqual((r["compared"], r["ids_checked"], r["matched_by"]), (3, 2, "id"))

    def test_small_logprob_shift_passes_large_fails(self):
        ref = [pos(10, CLEAR)]
        self.assertEqual(cl.compare_prompt(ref, [pos(10, [v + 0.05 for v in CLEAR])], 0.1)["failures"], [])
        self.assertTrue(cl.compare_prompt(ref, [pos(10, [v + 0.05 if i else v - 0.2 for i, v in enumerate(CLEAR)])],
                                          0.1)["failures"])

    def test_different_id_at_clear_margin_fails(self):
        cand = [cl.Position(11, "t11", -0.1, [(11, "t11", -0.1), (10, "t10", -2.5), (12, "t12", -3.0),
                                               (13, "t13", -3.5), (14, "t14", -4.0)])]
        r = cl.compare_prompt([pos(10, CLEAR)], cand, 0.1)
        self.assertTrue(any("chose" in f for f in r["failures"]))

    def test_different_id_at_tie_is_reported_not_failed(self):
        cand = [cl.Position(11, "t11", -0.70, [(11, "t11", -0.70), (10, "t10", -0.72), (12, "t12", -3.0),
                                                (13, "t13", -3.5), (14, "t14", -4.0)]), pos(99, CLEAR)]
        r = cl.compare_prompt([pos(10, CLOSE), pos(50, CLEAR)], cand, 0.1)
        self.assertEqual(r["failures"], [])
        self.assertEqual(r["tie_break_at"]["position"], 0)
        self.assertEqual(r["compared"], 1)  # the contexts differ afterwards

    def test_token_missing_from_top5(self):
        ref = [pos(10, CLEAR)]
        cand = [cl.Position(10, "t10", -0.1, [(10, "t10", -0.1), (11, "t11", -2.5), (12, "t12", -3.0),
                                               (13, "t13", -3.5), (77, "t77", -3.9)])]
        # t14 (-4.0) just below the candidate's 5th (-3.9), t77 (-3.9) just above the reference's (-4.0)
        self.assertEqual(cl.compare_prompt(ref, cand, 0.1)["failures"], [])
        cand[0].top[-1] = (77, "t77", -3.6)  # 0.4 above the reference's 5th: it should have been listed
        self.assertTrue(cl.compare_prompt(ref, cand, 0.1)["failures"])

    def test_text_matching_without_ids(self):
        ref = [pos(10, CLEAR)]
        cand = [pos(10, CLEAR, with_ids=False)]
        r = cl.compare_prompt(ref, cand, 0.1)
        self.assertEqual((r["failures"], r["matched_by"]), ([], "text"))

    def test_legacy_format(self):
        p = cl.from_legacy({"tokens": ["a"], "token_logprobs": [-0.1], "top_logprobs": [{"b": -2.0, "a": -0.1}]})
        self.assertEqual([t[1] for t in p[0].top], ["a", "b"])


class ControlTokens(unittest.TestCase):
    """llama-server names a control token '' where Spindle names it; text matching pairs them."""

    def at(self, chosen, names, logprobs):
        return cl.Position(None, chosen, logprobs[0], [(None, n, v) for n, v in zip(names, logprobs)])

    def test_empty_and_named_control_token_pair(self):
        ref = [self.at(".", [".", "", "a", "b", "c"], [-0.5, -1.96, -3.0, -3.1, -3.2])]
        cand = [self.at(".", [".", "<|im_end|>", "a", "b", "c"], [-0.5, -1.965, -3.0, -3.1, -3.2])]
        r = cl.compare_prompt(ref, cand, 0.1, match="text")
        self.assertEqual(r["failures"], [])
        self.assertAlmostEqual(r["max_abs_logprob_diff"], 0.005, places=6)
        chose = cl.compare_prompt([self.at("", ["", "a"], [-0.1, -3.0])], [self.at("<|im_end|>", ["<|im_end|>", "a"], [-0.1, -3.0])],
                                  0.1, match="text")
        self.assertEqual((chose["failures"], chose["ids_checked"]), ([], 1))

    def test_pairing_does_not_hide_a_difference(self):
        ref = [self.at(".", [".", "", "a", "b", "c"], [-0.5, -1.96, -3.0, -3.1, -3.2])]
        cand = [self.at(".", [".", "<|im_end|>", "a", "b", "c"], [-0.5, -1.5, -3.0, -3.1, -3.2])]
        self.assertNotEqual(cl.compare_prompt(ref, cand, 0.1, match="text")["failures"], [])
        two = [self.at(".", [".", "<|a|>", "<|b|>", "b", "c"], [-0.5, -1.96, -2.0, -3.1, -3.2])]
        self.assertNotEqual(cl.compare_prompt(ref, two, 0.1, match="text")["failures"], [])


if __name__ == "__main__":
    unittest.main()
