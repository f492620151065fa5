"""Checks of the hand-written eval set eval_sets/handbook-de (fictional employee handbook of
Nordwerk Systems GmbH): it loads, has enough sections and questions, its labels are consistent,
the five core sections state their key facts, and the held-out split is pinned."""
from __future__ import annotations

import hashlib

import pytest

from harness.evalset.load import iter_labelled, load_eval_set
from tests.conftest import ROOT

SET_DIR = ROOT / "eval_sets" / "handbook-de"
QUERY_TYPES = {"direct", "misleading", "borderline", "unanswerable"}

# sha256 of sessions.test.jsonl: the held-out split. A change here must show in review.
TEST_SPLIT_SHA256 = "ea6c856af81b72447afdf461f2a3322c3f90ec605527bb6be0ccc5f6ec320b64"

CORE_FACTS = {
    "hb-urlaub": ["30 Urlaubstage pro Kalenderjahr", "verfällt nicht automatisch", "31. März",
                  "HR-Portal", "Teamleitung"],
    "hb-homeoffice": ["bis zu 3 Tagen pro Woche", "Dienstag", "Bürotag", "Monitor", "Tastatur",
                      "Bürostuhl", "800 EUR pro Person"],
    "hb-reisekosten": ["vor Reiseantritt im Reisetool", "2. Klasse", "mehr als 600 km", "28 EUR",
                       "vollen Reisetag", "innerhalb von 30 Tagen"],
    "hb-it-sicherheit": ["VPN", "Pflicht", "Öffentliche WLAN-Netze darfst du ausschließlich über VPN",
                         "Zwei-Faktor-Authentifizierung", "Für jedes Konto",
                         "Verlorene oder gestohlene Geräte meldest du sofort", "Fernzugriff gesperrt"],
    "hb-weiterbildung": ["1.500 EUR pro Jahr", "Konferenzen", "Online-Kurse", "Fachbücher",
                         "Teamleitung", "zu deiner Tätigkeit passt"],
}


@pytest.fixture(scope="module")
def es():
    return load_eval_set(SET_DIR)


@pytest.fixture(scope="module")
def turns(es):
    return [(es.split_of[s.session_id], s, t) for s, _, _, t in iter_labelled(es)]


def test_loads_with_manifest(es):
    assert es.info.name == "handbook-de"
    assert es.info.version == "1.0"
    assert es.info.languages == ["de", "en"]
    assert es.info.written_here is True
    assert es.info.pooled_corpus is False
    assert es.info.filters == []


def test_sizes(es, turns):
    assert len(es.docs) >= 60
    assert len(turns) >= 60
    for d in es.docs.values():
        assert d.doc_id.startswith("hb-")
        assert d.title
        assert 400 <= len(d.text) <= 1200, (d.doc_id, len(d.text))


def test_one_labelled_turn_per_session(es):
    for s in es.sessions:
        assert s.domain == "handbook"
        assert len(s.turns) == 1 and s.turns[0].labels is not None, s.session_id


def test_labels_complete(turns):
    for _, s, t in turns:
        L = t.labels
        assert L.query_type in QUERY_TYPES, s.session_id
        assert L.language in ("de", "en"), s.session_id
        assert L.answerability in ("ANSWERABLE", "PARTIAL", "UNANSWERABLE"), s.session_id
        assert L.reference_answer and L.reference_rewrite, s.session_id
        assert all(g in (1, 2) for g in L.qrels.values()), s.session_id


def test_every_query_type_in_both_splits(turns):
    for split in ("main", "test"):
        present = {t.labels.query_type for sp, _, t in turns if sp == split}
        assert present == QUERY_TYPES, (split, present)


def test_test_split_is_about_a_quarter(turns):
    n_test = sum(sp == "test" for sp, _, _ in turns)
    assert 0.2 <= n_test / len(turns) <= 0.3


def test_unanswerable_have_no_relevant_section(turns):
    for _, s, t in turns:
        L = t.labels
        if L.query_type == "unanswerable":
            assert L.qrels == {}, s.session_id
            assert L.answerability == "UNANSWERABLE", s.session_id
        else:
            assert L.answerability != "UNANSWERABLE", s.session_id
            assert any(g >= 1 for g in L.qrels.values()), s.session_id


def test_misleading_surface_doc(es, turns):
    for _, s, t in turns:
        L = t.labels
        if L.query_type == "misleading":
            assert L.surface_doc in es.docs, s.session_id
            relevant = {d for d, g in L.qrels.items() if g >= 1}
            assert L.surface_doc not in relevant, s.session_id
        else:
            assert L.surface_doc is None, s.session_id


def test_borderline_partial_or_two_sections(turns):
    for _, s, t in turns:
        L = t.labels
        if L.query_type == "borderline":
            assert L.answerability == "PARTIAL" or len(L.qrels) >= 2, s.session_id


@pytest.mark.parametrize("doc_id", sorted(CORE_FACTS))
def test_core_sections_state_key_facts(es, doc_id):
    text = es.docs[doc_id].text
    for fact in CORE_FACTS[doc_id]:
        assert fact in text, (doc_id, fact)


def test_pension_section_says_nothing_about_vesting_or_years(es):
    text = es.docs["hb-altersvorsorge"].text.lower()
    for word in ("unverfallbar", "10 jahr", "zehn jahr", "jahren", "austritt", "kündig"):
        assert word not in text, word


def test_test_split_pinned():
    digest = hashlib.sha256((SET_DIR / "sessions.test.jsonl").read_bytes()).hexdigest()
    assert digest == TEST_SPLIT_SHA256
