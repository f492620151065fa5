"""Checks of the hand-written b2b-shop eval set (eval_sets/b2b-shop): it loads, its size, EAN check
digits, identifiers and filters in the labels, query-type coverage of both splits, entitlement
visibility of every relevant document, near-miss part numbers, and the pinned held-out split."""
from __future__ import annotations

import hashlib
import re
from collections import Counter

import pytest

from harness.evalset.load import load_eval_set
from tests.conftest import ROOT

SET_DIR = ROOT / "eval_sets" / "b2b-shop"

QUERY_TYPES = ("pronoun", "ellipsis", "ordinal", "changed_constraint", "topic_switch", "identifier", "self_contained")
# sha256 of sessions.test.jsonl: the held-out split changes only on purpose (update in the same review)
TEST_SPLIT_SHA256 = "f42d084d527a6120c7388600b07d382455709e8169160f1e9682392cc753d001"


@pytest.fixture(scope="module")
def es():
    return load_eval_set(SET_DIR)


def labelled(es, split=None):
    for s in es.sessions:
        if split and es.split_of[s.session_id] != split:
            continue
        for t in s.turns:
            if t.labels is not None:
                yield s, t


def products(es):
    return [d for d in es.docs.values() if "part_number" in d.metadata]


def ean13_ok(code: str) -> bool:
    if not (len(code) == 13 and code.isdigit()):
        return False
    s = sum(int(d) * (3 if i % 2 else 1) for i, d in enumerate(code[:12]))
    return (10 - s % 10) % 10 == int(code[12])


def test_loads_and_size(es):
    assert es.name == "b2b-shop"
    assert len(products(es)) >= 400
    assert len(es.sessions) >= 40
    n_test = sum(1 for s in es.sessions if es.split_of[s.session_id] == "test")
    assert n_test * 4 >= len(es.sessions), f"test split has {n_test} of {len(es.sessions)} sessions"
    for s in es.sessions:
        assert 3 <= len(s.turns) <= 6, s.session_id


def test_ean_check_digits(es):
    eans = [d.metadata["ean"] for d in es.docs.values() if "ean" in d.metadata]
    assert len(eans) >= 400
    bad = [e for e in eans if not ean13_ok(e)]
    assert not bad, bad
    assert not ean13_ok("4031287008905")  # the check itself rejects a wrong digit (valid one ends in 4)


def test_label_identifiers_appear_verbatim_in_corpus(es):
    haystack = []
    for d in es.docs.values():
        haystack.append(d.text)
        haystack.extend(str(v) for v in d.metadata.values())
    blob = "\n".join(haystack)
    missing = {i for _, t in labelled(es) for i in t.labels.identifiers if i not in blob}
    assert not missing, sorted(missing)


def test_identifiers_survive_in_reference_rewrite(es):
    for s, t in labelled(es):
        for i in t.labels.identifiers:
            assert i in (t.labels.reference_rewrite or ""), (s.session_id, t.user, i)


def test_at_least_50_distinct_identifiers(es):
    ids = {i for _, t in labelled(es) for i in t.labels.identifiers}
    assert len(ids) >= 50, len(ids)


def test_expected_filters_name_preference_fields(es):
    pref = {f.field for f in es.info.filters if f.kind == "preference"}
    for s, t in labelled(es):
        for f in t.labels.expected_filters:
            assert f.field in pref, (s.session_id, t.user, f.field)
        for f in t.state.filters:
            assert f.field in pref, (s.session_id, t.user, f.field)


def test_schema_declares_entitlements_and_safety_fields(es):
    ent = {f.field: f for f in es.info.filters if f.kind == "entitlement"}
    assert {f.account_key for f in ent.values()} >= {"assortment", "price_list", "ship_country"}
    assert all(f.type == "string_list" for f in ent.values())
    for name in ("pressure_rating_bar", "concentration_pct"):
        assert es.info.filter_field(name).safety_relevant
    units = {f.field: f.unit for f in es.info.filters}
    assert units["length_mm"] == "mm" and units["container_ml"] == "ml" and units["price_net"] == "EUR"


def test_every_query_type_in_both_splits(es):
    for split in ("main", "test"):
        c = Counter(t.labels.query_type for _, t in labelled(es, split))
        assert set(c) <= set(QUERY_TYPES), set(c) - set(QUERY_TYPES)
        for qt in QUERY_TYPES:
            assert c[qt] >= 3, f"{split}: {qt} appears {c[qt]} times"


def _visible(es, doc, account) -> bool:
    for f in es.info.filters:
        if f.kind != "entitlement" or not f.account_key:
            continue
        v = getattr(account, f.account_key, None)
        if v is None:
            continue
        if v not in (doc.metadata.get(f.field) or []):  # string_list: eq means "contains"
            return False
    return True


def test_relevant_documents_visible_to_account(es):
    for s, t in labelled(es):
        acc = (t.state.account or s.account)
        for doc_id, grade in t.labels.qrels.items():
            if grade >= 1:
                assert _visible(es, es.docs[doc_id], acc), (s.session_id, t.user, doc_id)


def test_service_pages_visible_to_every_account(es):
    svc = [d for d in es.docs.values() if d.metadata.get("category") == "service"]
    titles = " ".join(d.title.lower() for d in svc)
    for word in ("shipping", "returns", "invoices", "hazardous", "minimum order"):
        assert word in titles, word
    for s in es.sessions:
        for d in svc:
            assert _visible(es, d, s.account), (s.session_id, d.doc_id)


def test_near_miss_part_numbers_exist(es):
    by_part = {d.metadata["part_number"]: d for d in products(es)}
    for a, b in [("4711-32", "4711-33"), ("4711-32", "4712-32"), ("WX-6231-13", "WX-6231-14"),
                 ("3502-62", "3502-63")]:
        assert a in by_part and b in by_part and by_part[a].doc_id != by_part[b].doc_id, (a, b)
    # many label part numbers have a corpus neighbour that differs in a single character
    parts = sorted(by_part)
    label_parts = {i for _, t in labelled(es) for i in t.labels.identifiers if i in by_part}

    def near(p):
        return any(q != p and len(q) == len(p) and sum(x != y for x, y in zip(p, q)) == 1 for q in parts)

    assert sum(near(p) for p in label_parts) >= 20


def test_follow_up_turns_need_their_history(es):
    follow = ("pronoun", "ellipsis", "ordinal", "changed_constraint", "topic_switch")
    for s in es.sessions:
        for i, t in enumerate(s.turns):
            if t.labels and t.labels.query_type in follow:
                assert i >= 1, (s.session_id, t.user)
                assert t.labels.reference_rewrite and t.labels.reference_rewrite.lower() != t.user.lower()
            if t.labels and t.labels.query_type == "identifier":
                assert re.fullmatch(r"[A-Z]{0,2}-?\d{4}-\d{2}|\d{13}", t.user.strip()), t.user


def test_test_split_pinned():
    digest = hashlib.sha256((SET_DIR / "sessions.test.jsonl").read_bytes()).hexdigest()
    assert digest == TEST_SPLIT_SHA256, f"sessions.test.jsonl changed: {digest}"
