"""Write sessions.jsonl (main split) and sessions.test.jsonl (held-out split) of the b2b-shop
eval set from the hand-written session specs below.

The specs name products by part number, EAN or service doc_id; this script looks up doc ids, names,
prices and metadata in corpus.jsonl so that labels stay consistent with the catalogue. Nothing here
comes from a retrieval result: grade-2 products are picked by hand; `Q(...)` expands a hand-written
catalogue criterion (e.g. every M8 stainless hex bolt) over the corpus metadata, restricted to the
products the session's account may see. Run from anywhere (after build_catalogue.py):

    python eval_sets/b2b-shop/write_sessions.py

Conventions
- state.filters = the preference filters a perfect system had in force after the previous turn
  (= the previous turn's expected_filters); first turns start empty.
- expected_filters are derived from the previous turn's filters plus a hand-written delta
  (`ef`), or start afresh (`reset`, the default for topic_switch and identifier turns).
- identifiers = part numbers / EANs the user typed (in this turn, or earlier for the same product)
  that the rewrite must keep verbatim; each appears in the reference rewrite.
- qrels: 2 = the product or service page asked for, 1 = acceptable alternatives.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus.jsonl"
OUT = {"main": HERE / "sessions.jsonl", "test": HERE / "sessions.test.jsonl"}

DOCS = {}
BY_PART, BY_EAN = {}, {}
with CORPUS.open(encoding="utf-8") as f:
    for line in f:
        r = json.loads(line)
        DOCS[r["doc_id"]] = r
        md = r["metadata"]
        if "part_number" in md:
            BY_PART[md["part_number"]] = r
            BY_EAN[md["ean"]] = r

INFO = yaml.safe_load((HERE / "eval_set.yaml").read_text(encoding="utf-8"))
PREFERENCE = {f["field"] for f in INFO["filters"] if f.get("kind", "preference") == "preference"}

A2, A4, GALV, BRASS, PVC = "stainless steel A2", "stainless steel A4", "galvanised steel", "brass", "PVC-U"


def acct(assortment, price_list, currency, ship_country):
    return {"assortment": assortment, "price_list": price_list, "currency": currency, "ship_country": ship_country}


IND_DE = acct("A-industrial", "PL-DE-STD", "EUR", "DE")
KEY_DE = acct("A-full", "PL-DE-KEY", "EUR", "DE")
CLE_DE = acct("A-cleaning", "PL-DE-STD", "EUR", "DE")
IND_AT = acct("A-industrial", "PL-AT-STD", "EUR", "AT")
CLE_AT = acct("A-cleaning", "PL-AT-STD", "EUR", "AT")
IND_CH = acct("A-industrial", "PL-CH-STD", "CHF", "CH")
CLE_CH = acct("A-cleaning", "PL-CH-STD", "CHF", "CH")
FULL_NL = acct("A-full", "PL-NL-STD", "EUR", "NL")
CLE_NL = acct("A-cleaning", "PL-NL-STD", "EUR", "NL")

QUERY_TYPES = ("pronoun", "ellipsis", "ordinal", "changed_constraint", "topic_switch", "identifier", "self_contained")


# ---------------------------------------------------------------- lookup helpers
def doc(ref: str) -> dict:
    if ref in DOCS and ref.startswith("svc-"):
        return DOCS[ref]
    if ref in BY_PART:
        return BY_PART[ref]
    if ref in BY_EAN:
        return BY_EAN[ref]
    raise KeyError(f"unknown product reference {ref!r}")


def visible(r: dict, acc: dict) -> bool:
    md = r["metadata"]
    return (acc["assortment"] in md["assortment"] and acc["price_list"] in md["price_list"]
            and acc["ship_country"] in md["ship_countries"])


class Q:
    """A hand-written catalogue criterion, expanded over the corpus metadata for the account."""

    def __init__(self, **crit):
        self.crit = crit

    def expand(self, acc: dict) -> list[str]:
        out = []
        for r in DOCS.values():
            md = r["metadata"]
            if md.get("category") == "service" or not visible(r, acc):
                continue
            if all(_crit_ok(md.get(k), v) for k, v in self.crit.items()):
                out.append(r["doc_id"])
        return out


def _crit_ok(have, want) -> bool:
    if have is None:
        return False
    if isinstance(want, tuple):
        op, v = want
        return have >= v if op == "gte" else have <= v
    if isinstance(want, list):
        return have in want
    return have == want


def unit_price(r: dict) -> str:
    md = r["metadata"]
    unit = md["sales_unit"] if md["sales_unit"] != "container" else "container"
    return f"EUR {md['price_net']:.2f} per {unit}"


def expand_text(s: str) -> str:
    """{t:REF} title, {n:REF} part number, {p:REF} price, {x:REF} title + part number + price."""
    def rep(m):
        kind, ref = m.group(1), m.group(2)
        r = doc(ref)
        if kind == "t":
            return r["title"]
        if kind == "n":
            return r["metadata"]["part_number"]
        if kind == "p":
            return unit_price(r)
        if kind == "x":
            return f"{r['title']} (part number {r['metadata']['part_number']}, {unit_price(r)})"
        raise ValueError(kind)
    return re.sub(r"\{([tnpx]):([^}]+)\}", rep, s)


# ---------------------------------------------------------------- spec types
def T(u, qt, rw, *, ef=None, q2=(), q1=(), ids=(), shown=None, a="", ra="", lang="en", ans="ANSWERABLE",
      reset=None):
    return dict(u=u, qt=qt, rw=rw, ef=ef or {}, q2=list(q2), q1=list(q1), ids=list(ids), shown=shown, a=a,
                ra=ra, lang=lang, ans=ans, reset=reset)


def S(sid, split, domain, acc, turns):
    return dict(sid=sid, split=split, domain=domain, acc=acc, turns=turns)


# ================================================================ the sessions
SESSIONS = [
    # ------------------------------------------------------------ main split
    S("m01", "main", "fasteners", IND_DE, [
        T("Do you have M8 hex bolts in stainless steel?", "self_contained",
          "hex bolt DIN 933 M8 stainless steel",
          ef={"category": "hex bolt", "thread": "M8", "material": ("in", [A2, A4])},
          q2=[Q(category="hex bolt", thread="M8", material=[A2, A4])],
          shown=["4711-32", "4711-33", "4712-32"],
          a="Yes, DIN 933 hex bolts M8 in A2 and A4, for example:",
          ra="Yes. M8 hex bolts DIN 933 come in stainless steel A2 and A4 in lengths 20 to 60 mm, e.g. "
             "{x:4711-32}, {x:4711-33} and {x:4712-32}."),
        T("the second one in 60 mm?", "ordinal",
          "hex bolt DIN 933 M8 x 60 mm stainless steel A2",
          ef={"material": A2, "length_mm": 60}, q2=["4711-35"], q1=["4712-35"],
          shown=["4711-35", "4712-35", "4711-34"],
          a="The M8 A2 bolt is also available 60 mm long:",
          ra="Yes: {x:4711-35}."),
        T("hmm, not A2 - it's for a boat trailer, I need the seawater-resistant one", "changed_constraint",
          "hex bolt DIN 933 M8 x 60 mm stainless steel A4 seawater resistant",
          ef={"material": A4}, q2=["4712-35"], q1=["4712-34"],
          shown=["4712-35", "4712-34", "4712-33"],
          a="For seawater use A4 (AISI 316):",
          ra="Take the A4 version, which is acid- and seawater-resistant: {x:4712-35}."),
        T("and matching nuts?", "ellipsis",
          "hex nut DIN 934 M8 stainless steel A4",
          reset=True, ef={"category": "hex nut", "thread": "M8", "material": A4}, q2=["3102-44"],
          shown=["3102-44", "3101-44", "3302-44"],
          a="The matching nut in A4:",
          ra="The matching nut is {x:3102-44}."),
        T("ok, if I order today when will it be here?", "topic_switch",
          "delivery time shipping to Germany order today",
          q2=["svc-shipping-de"], q1=["svc-express", "svc-stock"], shown=["svc-shipping-de"],
          a="Delivery to Germany:",
          ra="Orders placed by 2 pm on a working day leave the warehouse the same day; parcels to Germany take "
             "1-2 working days (express next-day delivery before 10 am is available)."),
    ]),
    S("m02", "main", "fasteners", KEY_DE, [
        T("4711-32", "identifier", "4711-32", ids=["4711-32"], q2=["4711-32"], shown=["4711-32"],
          a="Here is the article:", ra="4711-32 is the {x:4711-32}."),
        T("do you have it in A4 as well?", "pronoun",
          "hex bolt DIN 933 M8 x 30 mm stainless steel A4",
          ef={"category": "hex bolt", "thread": "M8", "length_mm": 30, "material": A4}, q2=["4712-32"],
          shown=["4712-32", "4711-32"],
          a="Yes, the A4 version:", ra="Yes, the A4 version is {x:4712-32}."),
        T("can I get a 3.1 certificate with those?", "topic_switch",
          "inspection certificate 3.1 EN 10204 stainless steel fasteners",
          q2=["svc-certificates"], shown=["svc-certificates"],
          a="Certificates:", ra="Yes, inspection certificates 3.1 to EN 10204 are available for stainless steel "
                                "fasteners for EUR 15.00 per order line; order them together with the goods."),
        T("4711-33", "identifier", "4711-33", ids=["4711-33"], q2=["4711-33"], shown=["4711-33"],
          a="Here is the article:", ra="4711-33 is the {x:4711-33} (10 mm longer than 4711-32)."),
        T("same thing in 50?", "pronoun",
          "hex bolt DIN 933 M8 x 50 mm stainless steel A2",
          ef={"category": "hex bolt", "thread": "M8", "material": A2, "length_mm": 50}, q2=["4711-34"],
          shown=["4711-34"],
          a="In 50 mm:", ra="In 50 mm it is {x:4711-34}."),
    ]),
    S("m03", "main", "fittings", IND_AT, [
        T("I need a brass ball valve, 1/2 inch", "self_contained",
          "brass ball valve 1/2 inch DN15",
          ef={"category": "ball valve", "material": BRASS, "size": "1/2 in"}, q2=["2310-13"], q1=["IX-2311-13"],
          shown=["2310-13", "IX-2311-13", "2313-13"],
          a="Ball valves 1/2\":", ra="{x:2310-13}."),
        T("is it good for 40 bar?", "pronoun",
          "brass ball valve 1/2 inch DN15 pressure rating 40 bar",
          ef={"pressure_rating_bar": ("gte", 40)}, q2=["2310-13"], shown=["2310-13"],
          a="Pressure rating:", ra="Yes, the brass ball valve 1/2\" (2310-13) is rated PN 40: 40 bar at 20 °C."),
        T("and the 1 inch one?", "ellipsis",
          "brass ball valve 1 inch DN25 pressure rating",
          ef={"size": "1 in", "pressure_rating_bar": None}, q2=["2310-15"], q1=["IX-2311-15"],
          shown=["2310-15", "IX-2311-15"],
          a="The 1\" brass valve:", ra="The brass ball valve 1\" (2310-15) is only rated PN 30 (30 bar). For 40 bar "
                                     "at 1\" take the stainless steel {x:IX-2311-15}, rated PN 63."),
        T("brass isn't enough then, stainless instead", "changed_constraint",
          "stainless steel ball valve 1 inch DN25",
          ef={"material": A4}, q2=["IX-2311-15"], shown=["IX-2311-15"],
          a="Stainless 1\":", ra="{x:IX-2311-15}, rated PN 63."),
        T("how long does delivery to us take?", "topic_switch",
          "delivery time shipping to Austria",
          q2=["svc-shipping-at"], q1=["svc-express"], shown=["svc-shipping-at"],
          a="Delivery to Austria:", ra="Orders placed by 12 noon ship the same working day; parcels arrive in Austria "
                                       "in 2-3 working days, pallets in 3-4 working days."),
    ]),
    S("m04", "main", "cleaning", CLE_DE, [
        T("CleanPro alkaline degreaser 20%, 1 litre bottle", "self_contained",
          "CleanPro alkaline degreaser concentrate 20% 1 litre",
          ef={"category": "degreaser", "brand": "CleanPro", "concentration_pct": 20, "container_ml": 1000},
          q2=["8110-01"], q1=["8130-01"], shown=["8110-01", "8110-05", "8130-01"],
          a="Here it is:", ra="{x:8110-01}."),
        T("and in 10 litres?", "pronoun",
          "CleanPro alkaline degreaser concentrate 20% 10 litres",
          ef={"container_ml": 10000}, q2=["8110-10"], q1=["8130-10"], shown=["8110-10", "8130-10"],
          a="In 10 litres:", ra="{x:8110-10}."),
        T("is there a stronger one, 30 % or more?", "changed_constraint",
          "CleanPro alkaline degreaser extra strong concentration 30% or more 10 litres",
          ef={"concentration_pct": ("gte", 30)}, q2=["8111-10"], q1=["8111-05", "8111-25"],
          shown=["8111-10", "8111-05", "8111-25"],
          a="The extra strong version (35 %):",
          ra="Yes, the extra strong concentrate with 35 %: {x:8111-10}. It is classified as dangerous goods."),
        T("that's dangerous goods then? what's the extra shipping charge?", "topic_switch",
          "hazardous goods shipping surcharge chemicals Germany",
          q2=["svc-hazardous"], shown=["svc-hazardous"],
          a="Dangerous goods shipping:", ra="Yes. Dangerous goods ship by road as limited quantities with a surcharge of "
                                            "EUR 12.50 per shipment and 1-2 extra working days; no express delivery."),
    ]),
    S("m05", "main", "safety", FULL_NL, [
        T("nitrile disposable gloves, size L", "self_contained",
          "nitrile disposable gloves size L",
          ef={"category": "gloves", "material": "nitrile", "size": "L"},
          q2=[Q(category="gloves", material="nitrile", size="L")], shown=["9420-09", "9411-09", "9450-09"],
          a="Nitrile gloves in L:", ra="{x:9420-09} and {x:9411-09}."),
        T("the second one in XL", "ordinal",
          "nitrile disposable gloves black extra thick 0.20 mm size XL",
          ef={"size": "XL"}, q2=["9411-10"], shown=["9411-10"],
          a="In XL:", ra="{x:9411-10}."),
        T("do you also have FFP3 masks?", "self_contained",
          "FFP3 respirator mask",
          reset=True, ef={"category": "respiratory mask", "protection_class": "FFP3"},
          q2=[Q(category="respiratory mask", protection_class="FFP3")], shown=["9611-03", "9621-03", "9621-13"],
          a="FFP3 masks:", ra="Yes: {x:9611-03}, {x:9621-03}, {x:9611-13} and {x:9621-13}."),
        T("only the ones with an exhalation valve", "changed_constraint",
          "FFP3 respirator mask with exhalation valve",
          q2=["9611-13", "9621-13"], shown=["9611-13", "9621-13"],
          a="With valve:", ra="{x:9611-13} and {x:9621-13}."),
        T("can we send a box back once it's opened?", "topic_switch",
          "return opened personal protective equipment",
          q2=["svc-returns"], shown=["svc-returns"],
          a="Returns:", ra="No. Personal protective equipment that has been unpacked cannot be returned for hygiene "
                           "and safety reasons; unopened goods can be returned within 30 days."),
    ]),
    S("m06", "main", "fasteners", IND_CH, [
        T("socket head cap screws M6 x 20 in A4", "self_contained",
          "socket head cap screw DIN 912 M6 x 20 mm stainless steel A4",
          ef={"category": "socket cap screw", "thread": "M6", "length_mm": 20, "material": A4},
          q2=["WX-6222-12"], q1=["WX-6221-12"], shown=["WX-6222-12", "WX-6221-12", "WX-6222-13"],
          a="DIN 912 M6 x 20:", ra="{x:WX-6222-12}."),
        T("und in 30 mm?", "pronoun",
          "socket head cap screw DIN 912 M6 x 30 mm stainless steel A4",
          ef={"length_mm": 30}, q2=["WX-6222-14"], shown=["WX-6222-14"], lang="de",
          a="In 30 mm:", ra="{x:WX-6222-14}."),
        T("gibt es einen Mindestbestellwert für uns?", "topic_switch",
          "minimum order value Switzerland",
          q2=["svc-minimum-order"], q1=["svc-shipping-ch"], shown=["svc-minimum-order"], lang="de",
          a="Mindestbestellwert:", ra="Ja, für Lieferungen in die Schweiz beträgt der Mindestbestellwert CHF 200."),
        T("WX-6232-13", "identifier", "WX-6232-13", ids=["WX-6232-13"], q2=["WX-6232-13"], shown=["WX-6232-13"],
          a="Here is the article:", ra="WX-6232-13 is the {x:WX-6232-13}."),
    ]),
    S("m07", "main", "cleaning", CLE_AT, [
        T("4015522002803", "identifier", "4015522002803", ids=["4015522002803"], q2=["8310-25"], shown=["8310-25"],
          a="EAN 4015522002803:", ra="EAN 4015522002803 is the {x:8310-25}."),
        T("is there a 30 % version of it?", "pronoun",
          "CleanPro phosphoric acid descaler 30% 25 litres",
          ef={"category": "acid cleaner", "brand": "CleanPro", "concentration_pct": 30, "container_ml": 25000},
          q2=["8311-25"], q1=["8311-05", "8311-01"], shown=["8311-25", "8311-05", "8311-01"],
          a="The 30 % descaler:", ra="Yes: {x:8311-25}. It is dangerous goods."),
        T("something under 50 euros?", "changed_constraint",
          "CleanPro phosphoric acid descaler 30% price under 50 EUR",
          ef={"container_ml": None, "price_net": ("lte", 50)}, q2=["8311-01", "8311-05"],
          shown=["8311-05", "8311-01"],
          a="Under EUR 50:", ra="{x:8311-05} and {x:8311-01}."),
        T("what gloves should my staff wear for that?", "pronoun",
          "chemical-resistant gloves for phosphoric acid",
          reset=True, ef={"category": "gloves"}, q2=[Q(category="gloves", material="nitrile", sales_unit="pair")],
          q1=[Q(category="gloves", material="nitrile", sales_unit="box of 50")],
          shown=["9440-09", "9440-10", "9411-09"],
          a="For acids:", ra="Use the reusable chemical-resistant nitrile gauntlets 9440 (EN ISO 374-1 type A, "
                             "sizes 7-11), e.g. {x:9440-09}."),
        T("and how do you ship chemicals like that to us?", "topic_switch",
          "hazardous goods chemicals shipping to Austria",
          q2=["svc-hazardous"], q1=["svc-shipping-at"], shown=["svc-hazardous"],
          a="Dangerous goods:", ra="As limited quantities by road freight only, with a surcharge of EUR 12.50 per "
                                   "shipment, 1-2 extra working days and no express delivery."),
    ]),
    S("m08", "main", "fasteners", IND_DE, [
        T("threaded rod M10, galvanised - is that still 3503-63?", "self_contained",
          "3503-63 threaded rod DIN 976 M10 galvanised",
          ids=["3503-63"], ef={"category": "threaded rod", "thread": "M10", "material": GALV}, q2=["3503-63"],
          shown=["3503-63", "3501-63", "3502-63"],
          a="Threaded rods M10:", ra="Yes, 3503-63 is still the {x:3503-63}."),
        T("the first one - can you cut it to 500 mm?", "ordinal",
          "threaded rod M10 galvanised cut to length 500 mm",
          q2=["3503-63"], q1=["svc-minimum-order"], shown=["3503-63"],
          a="Cutting:", ra="Yes, 3503-63 is cut to length on request; threaded rods are cut to length from 10 pieces."),
        T("what nuts go with it?", "pronoun",
          "hex nut DIN 934 M10 galvanised",
          reset=True, ef={"category": "hex nut", "thread": "M10", "material": GALV}, q2=["3103-45"],
          shown=["3103-45"], a="Matching nut:", ra="{x:3103-45}."),
        T("and washers?", "ellipsis",
          "flat washer DIN 125 M10 galvanised",
          ef={"category": "washer"}, q2=["3303-45"], shown=["3303-45"],
          a="Matching washer:", ra="{x:3303-45}."),
    ]),
    S("m09", "main", "fittings", KEY_DE, [
        T("IX-2421-13", "identifier", "IX-2421-13", ids=["IX-2421-13"], q2=["IX-2421-13"], shown=["IX-2421-13"],
          a="Here is the article:", ra="IX-2421-13 is the {x:IX-2421-13}."),
        T("same as a tee", "ellipsis",
          "stainless steel tee 1/2 inch DN15",
          ef={"category": "tee", "material": A4, "size": "1/2 in"}, q2=["IX-2431-13"], shown=["IX-2431-13"],
          a="The tee:", ra="{x:IX-2431-13}."),
        T("too pricey - galvanised instead?", "changed_constraint",
          "galvanised tee 1/2 inch DN15",
          ef={"material": GALV}, q2=["2432-13"], q1=["2430-13"], shown=["2432-13", "2430-13"],
          a="Galvanised:", ra="{x:2432-13}."),
        T("what pressure can it take?", "pronoun",
          "galvanised tee 1/2 inch DN15 pressure rating",
          q2=["2432-13"], shown=["2432-13"],
          a="Pressure rating:", ra="The galvanised tee 1/2\" (2432-13) is rated PN 25: 25 bar at 20 °C."),
    ]),
    S("m10", "main", "cleaning", CLE_NL, [
        T("food-safe degreaser NSF A1", "self_contained",
          "food-safe degreaser NSF A1",
          ef={"category": "degreaser"}, q2=[Q(category="degreaser", brand="CleanPro", concentration_pct=12)],
          shown=["8170-01", "8170-05", "8170-10"],
          a="Food-safe degreaser:", ra="CleanPro Food-safe degreaser (NSF A1) 12 % in 1, 5, 10 and 25 litres, "
                                       "e.g. {x:8170-01}."),
        T("what does the second one cost?", "ordinal",
          "CleanPro food-safe degreaser NSF A1 12% 5 litres price",
          ef={"container_ml": 5000}, q2=["8170-05"], shown=["8170-05"],
          a="Price:", ra="{x:8170-05}."),
        T("and in 25 litres?", "pronoun",
          "CleanPro food-safe degreaser NSF A1 12% 25 litres",
          ef={"container_ml": 25000}, q2=["8170-25"], shown=["8170-25"],
          a="In 25 litres:", ra="{x:8170-25}."),
        T("do we get invoices without VAT?", "topic_switch",
          "invoice without VAT reverse charge Netherlands VAT ID",
          q2=["svc-invoices"], shown=["svc-invoices"],
          a="VAT:", ra="Yes, deliveries to the Netherlands are invoiced without VAT (reverse charge) when a valid VAT "
                       "ID is stored in your account."),
    ]),
    S("m11", "main", "fasteners", IND_DE, [
        T("4031287009246", "identifier", "4031287009246", ids=["4031287009246"], q2=["4731-33"], shown=["4731-33"],
          a="EAN 4031287009246:", ra="EAN 4031287009246 is the {x:4731-33}."),
        T("I need them in 80 mm", "pronoun",
          "hex bolt DIN 933 M12 x 80 mm stainless steel A2",
          ef={"category": "hex bolt", "thread": "M12", "material": A2, "length_mm": 80}, q2=["4731-34"],
          shown=["4731-34"], a="In 80 mm:", ra="{x:4731-34}."),
        T("too expensive, is there a galvanised one?", "changed_constraint",
          "hex bolt DIN 933 M12 x 80 mm galvanised",
          ef={"material": GALV}, q2=["4733-34"], shown=["4733-34"],
          a="Galvanised:", ra="Yes, {x:4733-34}."),
        T("do I get a discount if I pay early?", "topic_switch",
          "early payment discount payment terms",
          q2=["svc-invoices"], shown=["svc-invoices"],
          a="Payment terms:", ra="Yes: payment terms are 30 days net with 2 % discount within 10 days."),
    ]),
    S("m12", "main", "safety", FULL_NL, [
        T("9720-33", "identifier", "9720-33", ids=["9720-33"], q2=["9720-33"], shown=["9720-33"],
          a="Here is the article:", ra="9720-33 is the {x:9720-33}."),
        T("anything cheaper than that?", "changed_constraint",
          "ear protection earmuffs cheaper than EUR 28.12",
          reset=True, ef={"category": "ear protection", "price_net": ("lte", 28.11)},
          q2=["9720-30"], q1=["9710-01", "9711-01"], shown=["9720-30", "9710-01", "9711-01"],
          a="Cheaper hearing protection:", ra="{x:9720-30}; ear plugs are cheaper still, e.g. {x:9710-01}."),
        T("how many pairs are in the second one?", "ordinal",
          "Protexa foam ear plugs SNR 37 dB box of pairs",
          q2=["9710-01"], shown=["9710-01"],
          a="Contents:", ra="The foam ear plugs 9710-01 come in a box of 200 pairs ({p:9710-01})."),
        T("when would it get here?", "topic_switch",
          "delivery time shipping to the Netherlands",
          q2=["svc-shipping-nl"], shown=["svc-shipping-nl"],
          a="Delivery to the Netherlands:", ra="Orders placed by 1 pm ship the same working day and arrive in the "
                                               "Netherlands in 2-3 working days."),
    ]),
    S("m13", "main", "cleaning", CLE_CH, [
        T("citric acid descaler for coffee machines", "self_contained",
          "citric acid descaler coffee machines",
          ef={"category": "acid cleaner"}, q2=["8320-01"], q1=["8310-01"],
          shown=["8320-01", "8310-01", "PT-8330-01"],
          a="Descalers:", ra="{x:8320-01}."),
        T("is the second one safe on stainless steel?", "ordinal",
          "CleanPro phosphoric acid descaler 15% stainless steel",
          q2=["8310-01"], shown=["8310-01"],
          a="Phosphoric acid descaler:", ra="Yes, the phosphoric acid descaler 15 % (8310-01) removes limescale and "
                                            "rust film from stainless steel."),
        T("and in 10 litres?", "pronoun",
          "CleanPro phosphoric acid descaler 15% 10 litres",
          ef={"brand": "CleanPro", "concentration_pct": 15, "container_ml": 10000}, q2=["8310-10"],
          shown=["8310-10"], a="In 10 litres:", ra="{x:8310-10}."),
        T("can you ship the 30 % version to us at all?", "topic_switch",
          "dangerous goods acid cleaner shipping to Switzerland",
          q2=["svc-shipping-ch", "svc-hazardous"], shown=["svc-shipping-ch"],
          a="Shipping to Switzerland:", ra="No. The 30 % descaler is dangerous goods (ADR) and dangerous goods cannot "
                                           "be shipped to Switzerland."),
    ]),
    S("m14", "main", "fittings", IND_DE, [
        T("PVC ball valve 1 1/2 inch for a chemical line", "self_contained",
          "PVC-U ball valve 1 1/2 inch DN40 chemicals",
          ef={"category": "ball valve", "material": PVC, "size": "1 1/2 in"}, q2=["2313-17"],
          shown=["2313-17", "2313-16", "IX-2311-17"],
          a="PVC-U ball valves:", ra="{x:2313-17}."),
        T("what's the max pressure on the first one?", "ordinal",
          "PVC-U ball valve 1 1/2 inch DN40 maximum pressure",
          q2=["2313-17"], shown=["2313-17"],
          a="Pressure:", ra="The PVC-U ball valve 1 1/2\" (2313-17) is rated PN 10: 10 bar at 20 °C."),
        T("I need at least 16 bar", "changed_constraint",
          "ball valve 1 1/2 inch DN40 at least 16 bar",
          ef={"material": None, "pressure_rating_bar": ("gte", 16)}, q2=["IX-2311-17"], q1=["2310-17"],
          shown=["IX-2311-17", "2310-17"],
          a="1 1/2\" with at least 16 bar:", ra="PVC-U does not reach 16 bar at 1 1/2\". For a chemical line take "
                                                 "{x:IX-2311-17} (PN 40); brass {x:2310-17} is PN 25."),
        T("and in 2 inch?", "pronoun",
          "ball valve 2 inch DN50 at least 16 bar for chemicals",
          ef={"size": "2 in"}, q2=["IX-2311-18"], q1=["2310-18"], shown=["IX-2311-18", "2310-18"],
          a="In 2\":", ra="{x:IX-2311-18}, rated PN 40."),
    ]),
    S("m15", "main", "safety", KEY_DE, [
        T("cut-resistant gloves size 9", "self_contained",
          "cut-resistant gloves size 9",
          ef={"category": "gloves", "size": "9"}, q2=["9450-09"], shown=["9450-09", "9450-10", "9440-09"],
          a="Cut-resistant gloves:", ra="{x:9450-09}."),
        T("the first one in 10", "ordinal",
          "cut-resistant gloves level C HPPE nitrile coated size 10",
          ef={"material": "HPPE nitrile-coated", "size": "10"}, q2=["9450-10"], shown=["9450-10"],
          a="Size 10:", ra="{x:9450-10}."),
        T("9512-02", "identifier", "9512-02", ids=["9512-02"], q2=["9512-02"], shown=["9512-02"],
          a="Here is the article:", ra="9512-02 is the {x:9512-02}."),
        T("is there a version for people who wear glasses?", "pronoun",
          "over-glasses safety spectacles for prescription glasses wearers",
          reset=True, ef={"category": "eye protection"}, q2=["9511-01"], shown=["9511-01"],
          a="Over-glasses:", ra="Yes: {x:9511-01}; it fits over corrective glasses."),
    ]),
    S("m16", "main", "cleaning", CLE_DE, [
        T("alcohol surface disinfectant, ready to use, 750 ml", "self_contained",
          "alcohol-based surface disinfectant ready to use 750 ml",
          ef={"category": "disinfectant", "container_ml": 750}, q2=["8210-07"], q1=["8210-01"],
          shown=["8210-07", "8210-01", "8240-01"],
          a="Surface disinfectant:", ra="{x:8210-07}."),
        T("what's the contact time of that one?", "pronoun",
          "CleanPro alcohol-based surface disinfectant 750 ml contact time",
          q2=["8210-07"], shown=["8210-07"],
          a="Contact time:", ra="The alcohol-based surface disinfectant (8210-07) needs a contact time of 30 seconds."),
        T("something that is not flammable?", "changed_constraint",
          "non-flammable surface disinfectant without alcohol",
          ef={"container_ml": None, "hazardous_goods": False}, q2=["8240-01", "8230-01"],
          q1=[Q(category="disinfectant", hazardous_goods=False)], shown=["8240-01", "8230-01", "8250-01"],
          a="Non-flammable disinfectants:", ra="{x:8240-01} (residue-free, for food contact surfaces) or the QAC "
                                               "disinfectant cleaner {x:8230-01}."),
        T("the hydrogen peroxide one in 5 litres", "ellipsis",
          "CleanPro hydrogen peroxide disinfectant 3% 5 litres",
          ef={"container_ml": 5000}, q2=["8240-05"], shown=["8240-05"],
          a="In 5 litres:", ra="{x:8240-05}."),
    ]),
    S("m17", "main", "fasteners", IND_AT, [
        T("Haben Sie Sechskantmuttern M16 in A4?", "self_contained",
          "hex nut DIN 934 M16 stainless steel A4",
          ef={"category": "hex nut", "thread": "M16", "material": A4}, q2=["3102-47"],
          shown=["3102-47", "3101-47", "3103-47"], lang="de",
          a="Sechskantmuttern M16:", ra="Ja: {x:3102-47}."),
        T("und passende Scheiben?", "ellipsis",
          "flat washer DIN 125 M16 stainless steel A4",
          ef={"category": "washer"}, q2=["3302-47"], shown=["3302-47", "3301-47", "3303-47"], lang="de",
          a="Scheiben M16:", ra="{x:3302-47}."),
        T("die zweite, aber für M12", "ordinal",
          "flat washer DIN 125 M12 stainless steel A2",
          ef={"thread": "M12", "material": A2}, q2=["3301-46"], shown=["3301-46"], lang="de",
          a="Für M12:", ra="{x:3301-46}."),
        T("wann kommt die Lieferung bei uns an?", "topic_switch",
          "delivery time shipping to Austria",
          q2=["svc-shipping-at"], shown=["svc-shipping-at"], lang="de",
          a="Lieferzeit Österreich:", ra="Bestellungen bis 12 Uhr verlassen das Lager am selben Arbeitstag; Pakete "
                                         "sind in 2-3 Arbeitstagen in Österreich."),
    ]),
    S("m18", "main", "fasteners", IND_DE, [
        T("do you have 4712-32 and 3102-44 in stock?", "self_contained",
          "4712-32 3102-44 stock availability",
          ids=["4712-32", "3102-44"], q2=["4712-32", "3102-44"], q1=["svc-stock"],
          shown=["4712-32", "3102-44"],
          a="Both articles:", ra="{x:4712-32} and {x:3102-44}; the stock shown on the product page is updated every "
                                 "15 minutes."),
        T("and the matching washers?", "ellipsis",
          "flat washer DIN 125 M8 stainless steel A4",
          ef={"category": "washer", "thread": "M8", "material": A4}, q2=["3302-44"], shown=["3302-44"],
          a="Washers:", ra="{x:3302-44}."),
        T("how long does it take if one of them is backordered?", "topic_switch",
          "backorder delivery time out of stock",
          q2=["svc-stock"], shown=["svc-stock"],
          a="Backorders:", ra="Backordered items ship as soon as they arrive, usually within 5-10 working days; "
                              "partial deliveries are free of charge."),
        T("4712-33", "identifier", "4712-33", ids=["4712-33"], q2=["4712-33"], shown=["4712-33"],
          a="Here is the article:", ra="4712-33 is the {x:4712-33}."),
    ]),
    S("m19", "main", "cleaning", CLE_NL, [
        T("PT-8330-05", "identifier", "PT-8330-05", ids=["PT-8330-05"], q2=["PT-8330-05"], shown=["PT-8330-05"],
          a="Here is the article:", ra="PT-8330-05 is the {x:PT-8330-05}."),
        T("and the 10 litre one?", "pronoun",
          "PuraTec sanitary acid cleaner 12% 10 litres",
          ef={"category": "acid cleaner", "brand": "PuraTec", "container_ml": 10000}, q2=["PT-8330-10"],
          shown=["PT-8330-10"], a="In 10 litres:", ra="{x:PT-8330-10}."),
        T("something milder for coffee machines?", "changed_constraint",
          "mild citric acid descaler for coffee machines 10 litres",
          ef={"brand": None}, q2=["8320-10"], q1=["8320-01", "8320-05"], shown=["8320-10", "8320-05", "8320-01"],
          a="Milder descaler:", ra="{x:8320-10}, a mild biodegradable descaler for coffee machines and kettles."),
        T("can I return it if it's still sealed?", "topic_switch",
          "return unopened chemicals returns policy",
          q2=["svc-returns"], shown=["svc-returns"],
          a="Returns:", ra="Unopened goods in original packaging can be returned within 30 days (restocking fee 10 % "
                           "without a fault); opened chemicals cannot be returned."),
    ]),
    S("m20", "main", "fittings", IND_CH, [
        T("stainless 3/4 inch coupling", "self_contained",
          "stainless steel socket coupling 3/4 inch DN20",
          ef={"category": "coupling", "material": A4, "size": "3/4 in"}, q2=["IX-2441-14"],
          shown=["IX-2441-14", "IX-2421-14", "IX-2431-14"],
          a="3/4\" stainless fittings:", ra="{x:IX-2441-14}."),
        T("the third one in 1 inch", "ordinal",
          "stainless steel tee 1 inch DN25",
          ef={"category": "tee", "size": "1 in"}, q2=["IX-2431-15"], shown=["IX-2431-15"],
          a="Tee 1\":", ra="{x:IX-2431-15}."),
        T("brass is fine too if it's cheaper", "changed_constraint",
          "brass tee 1 inch DN25",
          ef={"material": BRASS}, q2=["2430-15"], shown=["2430-15"],
          a="Brass tee:", ra="{x:2430-15}."),
        T("can I get material certificates for the stainless parts?", "topic_switch",
          "material certificate 3.1 stainless steel fittings",
          q2=["svc-certificates"], shown=["svc-certificates"],
          a="Certificates:", ra="Yes, inspection certificates 3.1 to EN 10204 for stainless steel fittings cost "
                                "EUR 15.00 per order line; order them together with the goods."),
    ]),
    S("m21", "main", "cleaning", KEY_DE, [
        T("8231-05", "identifier", "8231-05", ids=["8231-05"], q2=["8231-05"], shown=["8231-05"],
          a="Here is the article:", ra="8231-05 is the {x:8231-05}."),
        T("what's the dosage for it?", "pronoun",
          "8231-05 disinfectant cleaner QAC high strength dosage dilution",
          ids=["8231-05"], q2=["8231-05"], shown=["8231-05"],
          a="Dosage:", ra="Dilute the high-strength QAC concentrate (8231-05) 0.25 % to 1 %."),
        T("the normal strength is enough, in 10 litres", "changed_constraint",
          "Kratzer Chemie disinfectant cleaner concentrate QAC 2.5% 10 litres",
          ef={"category": "disinfectant", "brand": "Kratzer Chemie", "concentration_pct": 2.5,
              "container_ml": 10000}, q2=["8230-10"], shown=["8230-10"],
          a="Normal strength, 10 l:", ra="{x:8230-10}."),
        T("can you deliver that tomorrow morning?", "topic_switch",
          "express next day delivery Germany",
          q2=["svc-express"], q1=["svc-shipping-de"], shown=["svc-express"],
          a="Express:", ra="Yes, parcels ordered by 2 pm can be delivered next working day before 10 am or 12 noon "
                           "(surcharge EUR 19.00)."),
    ]),
    S("m22", "main", "fasteners", IND_DE, [
        T("countersunk screws M5 x 16 A2", "self_contained",
          "countersunk screw DIN 7991 M5 x 16 mm stainless steel A2",
          ef={"category": "countersunk screw", "thread": "M5", "length_mm": 16, "material": A2},
          q2=["WX-6411-22"], shown=["WX-6411-22", "WX-6411-23", "WX-6412-22"],
          a="Countersunk M5:", ra="{x:WX-6411-22}."),
        T("the last one is A4, right?", "ordinal",
          "countersunk screw DIN 7991 M5 x 16 mm stainless steel A4",
          ef={"material": A4}, q2=["WX-6412-22"], shown=["WX-6412-22"],
          a="Yes:", ra="Yes, WX-6412-22 is A4: {x:WX-6412-22}."),
        T("4045310006164", "identifier", "4045310006164", ids=["4045310006164"], q2=["WX-6412-23"],
          shown=["WX-6412-23"], a="EAN 4045310006164:", ra="EAN 4045310006164 is the {x:WX-6412-23}."),
        T("and 12 mm?", "pronoun",
          "countersunk screw DIN 7991 M5 x 12 mm stainless steel A4",
          ef={"category": "countersunk screw", "thread": "M5", "material": A4, "length_mm": 12},
          q2=["WX-6412-21"], shown=["WX-6412-21"], a="In 12 mm:", ra="{x:WX-6412-21}."),
    ]),
    S("m23", "main", "fasteners", FULL_NL, [
        T("hex nuts M6 in A2", "self_contained",
          "hex nut DIN 934 M6 stainless steel A2",
          ef={"category": "hex nut", "thread": "M6", "material": A2}, q2=["3101-43"],
          shown=["3101-43", "3102-43", "3103-43"],
          a="Hex nuts M6:", ra="{x:3101-43}."),
        T("anything cheaper than that?", "changed_constraint",
          "hex nut DIN 934 M6 cheaper than EUR 2.56",
          ef={"material": None, "price_net": ("lte", 2.55)}, q2=["3103-43"], shown=["3103-43"],
          a="Cheaper:", ra="The galvanised version {x:3103-43}."),
        T("the same in M10", "pronoun",
          "hex nut DIN 934 M10 galvanised",
          ef={"thread": "M10", "material": GALV, "price_net": None}, q2=["3103-45"], shown=["3103-45"],
          a="M10:", ra="{x:3103-45}."),
        T("3103-46", "identifier", "3103-46", ids=["3103-46"], q2=["3103-46"], shown=["3103-46"],
          a="Here is the article:", ra="3103-46 is the {x:3103-46}."),
    ]),
    S("m24", "main", "safety", CLE_AT, [
        T("chemical splash goggles", "self_contained",
          "chemical splash goggles",
          ef={"category": "eye protection"}, q2=["9512-01"], q1=["9513-01"],
          shown=["9512-01", "9513-01", "9512-02"],
          a="Splash protection:", ra="{x:9512-01}; for full face protection {x:9513-01}."),
        T("does the second one cover the whole face?", "ordinal",
          "face shield with brow guard polycarbonate visor full face",
          q2=["9513-01"], shown=["9513-01"],
          a="Face shield:", ra="Yes, the face shield 9513-01 gives full face splash protection (EN 166 3 B)."),
        T("9440-09", "identifier", "9440-09", ids=["9440-09"], q2=["9440-09"], shown=["9440-09"],
          a="Here is the article:", ra="9440-09 is the {x:9440-09}."),
        T("one size bigger please", "changed_constraint",
          "chemical-resistant nitrile gauntlets size 10",
          ef={"category": "gloves", "size": "10"}, q2=["9440-10"], shown=["9440-10"],
          a="Size 10:", ra="{x:9440-10}."),
    ]),
    S("m25", "main", "fasteners", IND_DE, [
        T("3502-62", "identifier", "3502-62", ids=["3502-62"], q2=["3502-62"], shown=["3502-62"],
          a="Here is the article:", ra="3502-62 is the {x:3502-62}."),
        T("3502-63", "identifier", "3502-63", ids=["3502-63"], q2=["3502-63"], shown=["3502-63"],
          a="Here is the article:", ra="3502-63 is the {x:3502-63}."),
        T("so the M8 one only comes as a bundle?", "ellipsis",
          "3502-62 threaded rod M8 A4 bundle of 5",
          ids=["3502-62"], ef={"category": "threaded rod", "thread": "M8", "material": A4}, q2=["3502-62"],
          shown=["3502-62"], a="M8:", ra="Yes, the M8 A4 rod 3502-62 is sold as a bundle of 5 ({p:3502-62})."),
        T("can those be cut to length?", "pronoun",
          "threaded rod M8 A4 cut to length",
          q2=["3502-62"], q1=["svc-minimum-order"], shown=["3502-62"],
          a="Cutting:", ra="Yes, on request; threaded rods are cut to length from 10 pieces."),
    ]),
    S("m26", "main", "fittings", IND_AT, [
        T("2442-14", "identifier", "2442-14", ids=["2442-14"], q2=["2442-14"], shown=["2442-14"],
          a="Here is the article:", ra="2442-14 is the {x:2442-14}."),
        T("is 2440-14 the brass version of 2442-14?", "self_contained",
          "2440-14 2442-14 brass socket coupling 3/4 inch",
          ids=["2440-14", "2442-14"], q2=["2440-14"], q1=["2442-14"], shown=["2440-14"],
          a="2440-14:", ra="Yes, 2440-14 is the {x:2440-14}."),
        T("I need an elbow in that size as well", "ellipsis",
          "brass elbow 90 degree 3/4 inch DN20",
          ef={"category": "elbow", "material": BRASS, "size": "3/4 in"}, q2=["2420-14"], shown=["2420-14"],
          a="Elbow 3/4\":", ra="{x:2420-14}."),
        T("is there a surcharge if the order stays small?", "topic_switch",
          "small-quantity surcharge minimum order value Austria",
          q2=["svc-minimum-order"], shown=["svc-minimum-order"],
          a="Small orders:", ra="There is no minimum order for Austria, but orders under EUR 50 net carry a "
                                "small-quantity surcharge of EUR 7.50."),
    ]),
    S("m27", "main", "safety", KEY_DE, [
        T("9610-02", "identifier", "9610-02", ids=["9610-02"], q2=["9610-02"], shown=["9610-02"],
          a="Here is the article:", ra="9610-02 is the {x:9610-02}."),
        T("same with a valve", "ellipsis",
          "Safehand FFP2 respirator mask with exhalation valve",
          ef={"category": "respiratory mask", "protection_class": "FFP2", "brand": "Safehand"}, q2=["9610-12"],
          q1=["9620-12"], shown=["9610-12", "9620-12"], a="With valve:", ra="{x:9610-12}."),
        T("and in FFP3?", "pronoun",
          "Safehand FFP3 respirator mask with exhalation valve",
          ef={"protection_class": "FFP3"}, q2=["9611-13"], q1=["9621-13"], shown=["9611-13", "9621-13"],
          a="FFP3 with valve:", ra="{x:9611-13}."),
        T("is the Protexa one cheaper?", "changed_constraint",
          "Protexa FFP3 respirator mask with exhalation valve",
          ef={"brand": "Protexa"}, q2=["9621-13"], shown=["9621-13"],
          a="Protexa:", ra="Yes: {x:9621-13}."),
    ]),
    S("m28", "main", "cleaning", CLE_DE, [
        T("low-foaming degreaser for a parts washer, 25 litres", "self_contained",
          "low foaming degreaser parts washer 25 litres",
          ef={"category": "degreaser", "container_ml": 25000}, q2=["8160-25", "8130-25"], q1=["8110-25"],
          shown=["8160-25", "8130-25", "8110-25"],
          a="For parts washers:", ra="{x:8160-25} or {x:8130-25}."),
        T("is the first one ok for aluminium?", "ordinal",
          "Kratzer Chemie water-based parts cleaner 5% aluminium",
          ef={"brand": "Kratzer Chemie", "concentration_pct": 5}, q2=["8160-25"], shown=["8160-25"],
          a="Aluminium:", ra="Yes, the water-based parts cleaner (8160-25) is gentle on aluminium and brass."),
        T("a drum of it?", "pronoun",
          "Kratzer Chemie water-based parts cleaner 5% 200 litre drum",
          ef={"container_ml": 200000}, q2=["8160-20"], shown=["8160-20"],
          a="200 litres:", ra="{x:8160-20}."),
        T("can you deliver a pallet to us within 2 days?", "topic_switch",
          "pallet delivery time Germany",
          q2=["svc-shipping-de"], shown=["svc-shipping-de"],
          a="Pallets:", ra="Pallets to Germany take 2-3 working days, so 2 days is possible but not guaranteed."),
    ]),
    S("m29", "main", "fasteners", IND_CH, [
        T("hex bolts M16 x 80, galvanised", "self_contained",
          "hex bolt DIN 933 M16 x 80 mm galvanised",
          ef={"category": "hex bolt", "thread": "M16", "length_mm": 80, "material": GALV}, q2=["4743-33"],
          shown=["4743-33"], a="M16 x 80:", ra="{x:4743-33}."),
        T("in stainless?", "ellipsis",
          "hex bolt DIN 933 M16 x 80 mm stainless steel",
          ef={"material": ("in", [A2, A4])}, q2=["4741-33", "4742-33"], shown=["4741-33", "4742-33"],
          a="Stainless:", ra="{x:4741-33} and {x:4742-33}."),
        T("the A4 one in 100 mm", "ellipsis",
          "hex bolt DIN 933 M16 x 100 mm stainless steel A4",
          ef={"material": A4, "length_mm": 100}, q2=["4742-34"], shown=["4742-34"],
          a="A4, 100 mm:", ra="{x:4742-34}."),
        T("who pays the customs on our side?", "topic_switch",
          "customs duties VAT shipping to Switzerland",
          q2=["svc-shipping-ch"], shown=["svc-shipping-ch"],
          a="Customs:", ra="We act as importer: Swiss VAT and customs fees are invoiced in CHF with the goods (DDP)."),
    ]),
    S("m30", "main", "cleaning", CLE_DE, [
        T("hand disinfectant gel 500 ml, EAN 4060391008050", "self_contained",
          "hand disinfectant gel 500 ml 4060391008050",
          ids=["4060391008050"], ef={"category": "disinfectant", "container_ml": 500}, q2=["PT-8220-00"], shown=["PT-8220-00"],
          a="Hand disinfectant:", ra="{x:PT-8220-00}."),
        T("1 litre?", "pronoun",
          "PuraTec hand disinfectant gel 1 litre",
          ef={"container_ml": 1000}, q2=["PT-8220-01"], shown=["PT-8220-01"],
          a="1 litre:", ra="{x:PT-8220-01}."),
        T("und im 5-Liter-Kanister?", "pronoun",
          "PuraTec hand disinfectant gel 5 litre canister",
          ef={"container_ml": 5000}, q2=["PT-8220-05"], shown=["PT-8220-05"], lang="de",
          a="5 Liter:", ra="{x:PT-8220-05}."),
    ]),
    S("m31", "main", "fasteners", IND_DE, [
        T("I'm reordering 4701-31, 3101-43 and 3301-43", "self_contained",
          "4701-31 3101-43 3301-43",
          ids=["4701-31", "3101-43", "3301-43"], q2=["4701-31", "3101-43", "3301-43"],
          shown=["4701-31", "3101-43", "3301-43"],
          a="Your articles:", ra="{x:4701-31}, {x:3101-43} and {x:3301-43}."),
        T("the second one in A4 instead", "ordinal",
          "hex nut DIN 934 M6 stainless steel A4",
          ef={"category": "hex nut", "thread": "M6", "material": A4}, q2=["3102-43"], shown=["3102-43"],
          a="In A4:", ra="{x:3102-43}."),
        T("do you also have 3303-43?", "self_contained",
          "3303-43", ids=["3303-43"], reset=True, q2=["3303-43"], shown=["3303-43"],
          a="3303-43:", ra="Yes, 3303-43 is the {x:3303-43}."),
        T("when will they ship?", "topic_switch",
          "shipping time Germany same day dispatch",
          q2=["svc-shipping-de"], q1=["svc-stock"], shown=["svc-shipping-de"],
          a="Dispatch:", ra="Orders placed by 2 pm on a working day leave the warehouse the same day if in stock; "
                            "parcels to Germany take 1-2 working days."),
    ]),
    S("m32", "main", "fittings", KEY_DE, [
        T("Do you have 2310-14 or IX-2311-14 in stock?", "self_contained",
          "2310-14 IX-2311-14 stock",
          ids=["2310-14", "IX-2311-14"], q2=["2310-14", "IX-2311-14"], q1=["svc-stock"],
          shown=["2310-14", "IX-2311-14"],
          a="Both valves:", ra="{x:2310-14} and {x:IX-2311-14}."),
        T("which of them takes more pressure?", "pronoun",
          "2310-14 IX-2311-14 ball valve 3/4 inch pressure rating",
          ids=["2310-14", "IX-2311-14"], q2=["IX-2311-14"], q1=["2310-14"],
          shown=["IX-2311-14", "2310-14"],
          a="Pressure:", ra="The stainless IX-2311-14 is rated PN 63, the brass 2310-14 PN 30."),
        T("the PVC one in that size?", "ellipsis",
          "PVC-U ball valve 3/4 inch DN20",
          ef={"category": "ball valve", "material": PVC, "size": "3/4 in"}, q2=["2313-14"], shown=["2313-14"],
          a="PVC-U 3/4\":", ra="{x:2313-14}, rated PN 16."),
        T("4051153006131", "identifier", "4051153006131", ids=["4051153006131"], q2=["2313-15"],
          shown=["2313-15"], a="EAN 4051153006131:", ra="EAN 4051153006131 is the {x:2313-15}."),
    ]),
    S("m33", "main", "cleaning", CLE_DE, [
        T("8311-05 or 8310-05 - which one is meant for boilers?", "self_contained",
          "8311-05 8310-05 descaler boilers",
          ids=["8311-05", "8310-05"], q2=["8311-05"], q1=["8310-05"], shown=["8311-05", "8310-05"],
          a="For boilers:", ra="{x:8311-05}: the 30 % descaler is for heavy-duty descaling of boilers, "
                               "dishwashers and cooling circuits."),
        T("ok, 10 litres of that one", "pronoun",
          "CleanPro phosphoric acid descaler 30% 10 litres",
          ef={"category": "acid cleaner", "brand": "CleanPro", "concentration_pct": 30, "container_ml": 10000},
          q2=["8311-10"], shown=["8311-10"], a="10 litres:", ra="{x:8311-10}."),
        T("4015522002841", "identifier", "4015522002841", ids=["4015522002841"], q2=["8311-25"],
          shown=["8311-25"], a="EAN 4015522002841:", ra="EAN 4015522002841 is the {x:8311-25}."),
    ]),
    S("m34", "main", "safety", IND_AT, [
        T("9411-08", "identifier", "9411-08", ids=["9411-08"], q2=["9411-08"], shown=["9411-08"],
          a="Here is the article:", ra="9411-08 is the {x:9411-08}."),
        T("one size up", "changed_constraint",
          "nitrile disposable gloves black extra thick 0.20 mm size L",
          ef={"category": "gloves", "material": "nitrile", "size": "L"}, q2=["9411-09"], shown=["9411-09"],
          a="Size L:", ra="{x:9411-09}."),
        T("9450-08", "identifier", "9450-08", ids=["9450-08"], q2=["9450-08"], shown=["9450-08"],
          a="Here is the article:", ra="9450-08 is the {x:9450-08}."),
        T("and in L?", "pronoun",
          "cut-resistant gloves level C HPPE nitrile coated size 9 (L)",
          ef={"category": "gloves", "material": "HPPE nitrile-coated", "size": "9"}, q2=["9450-09"],
          shown=["9450-09"], a="Size 9 (L):", ra="{x:9450-09}."),
    ]),

    # ------------------------------------------------------------ test split
    S("t01", "test", "fasteners", IND_DE, [
        T("Do you have 4721-32 in A4?", "self_contained",
          "4721-32 hex bolt DIN 933 M10 x 40 mm stainless steel A4",
          ids=["4721-32"], ef={"category": "hex bolt", "thread": "M10", "length_mm": 40, "material": A4},
          q2=["4722-32"], q1=["4721-32"], shown=["4722-32", "4721-32"],
          a="The A4 version of 4721-32:", ra="Yes, the A4 version of 4721-32 is {x:4722-32}."),
        T("and 50 long?", "pronoun",
          "hex bolt DIN 933 M10 x 50 mm stainless steel A4",
          ef={"length_mm": 50}, q2=["4722-33"], shown=["4722-33"], a="In 50 mm:", ra="{x:4722-33}."),
        T("actually galvanised is fine", "changed_constraint",
          "hex bolt DIN 933 M10 x 50 mm galvanised",
          ef={"material": GALV}, q2=["4723-33"], shown=["4723-33", "4723-32", "4723-34"],
          a="Galvanised:", ra="{x:4723-33}."),
        T("the first one but in M12", "ordinal",
          "hex bolt DIN 933 M12 x 50 mm galvanised",
          ef={"thread": "M12"}, q2=["4733-32"], shown=["4733-32"], a="M12 x 50:", ra="{x:4733-32}."),
        T("what happens if my order is under 50 euros?", "topic_switch",
          "small-quantity surcharge order under EUR 50 Germany",
          q2=["svc-minimum-order"], shown=["svc-minimum-order"],
          a="Small orders:", ra="There is no minimum order for Germany, but orders under EUR 50 net carry a "
                                "small-quantity surcharge of EUR 7.50."),
    ]),
    S("t02", "test", "cleaning", CLE_AT, [
        T("8130-10", "identifier", "8130-10", ids=["8130-10"], q2=["8130-10"], shown=["8130-10"],
          a="Here is the article:", ra="8130-10 is the {x:8130-10}."),
        T("and in 25 litres?", "pronoun",
          "Kratzer Chemie heavy-duty industrial degreaser 15% 25 litres",
          ef={"category": "degreaser", "brand": "Kratzer Chemie", "concentration_pct": 15, "container_ml": 25000},
          q2=["8130-25"], shown=["8130-25"], a="In 25 litres:", ra="{x:8130-25}."),
        T("I'd rather have something solvent-free and biodegradable", "changed_constraint",
          "solvent-free biodegradable citrus degreaser",
          ef={"brand": None, "concentration_pct": None, "container_ml": None},
          q2=[Q(category="degreaser", brand="PuraTec")], shown=["PT-8150-05", "PT-8150-10", "PT-8150-01"],
          a="Citrus degreaser:", ra="The PuraTec citrus degreaser, solvent-free 10 %, e.g. {x:PT-8150-05}; the "
                                    "largest container is 10 litres."),
        T("the second one, what does it cost?", "ordinal",
          "PuraTec citrus degreaser solvent-free 10% 10 litres price",
          ef={"brand": "PuraTec", "container_ml": 10000}, q2=["PT-8150-10"], shown=["PT-8150-10"],
          a="Price:", ra="{x:PT-8150-10}."),
    ]),
    S("t03", "test", "safety", FULL_NL, [
        T("4033364002133", "identifier", "4033364002133", ids=["4033364002133"], q2=["9610-02"],
          shown=["9610-02"], a="EAN 4033364002133:", ra="EAN 4033364002133 is the {x:9610-02}."),
        T("FFP3 of the same brand?", "ellipsis",
          "Safehand FFP3 respirator mask",
          ef={"category": "respiratory mask", "protection_class": "FFP3", "brand": "Safehand"},
          q2=["9611-03", "9611-13"], shown=["9611-03", "9611-13"],
          a="Safehand FFP3:", ra="{x:9611-03} and {x:9611-13}."),
        T("the second one in the Protexa version", "ordinal",
          "Protexa FFP3 respirator mask with exhalation valve",
          ef={"brand": "Protexa"}, q2=["9621-13"], shown=["9621-13"], a="Protexa:", ra="{x:9621-13}."),
        T("when does it arrive if I order now?", "topic_switch",
          "delivery time shipping to the Netherlands",
          q2=["svc-shipping-nl"], shown=["svc-shipping-nl"],
          a="Delivery:", ra="Orders placed by 1 pm ship the same working day and arrive in the Netherlands in 2-3 "
                            "working days."),
    ]),
    S("t04", "test", "fittings", IND_AT, [
        T("stainless ball valve 1/2 inch", "self_contained",
          "stainless steel ball valve 1/2 inch DN15",
          ef={"category": "ball valve", "material": A4, "size": "1/2 in"}, q2=["IX-2311-13"],
          shown=["IX-2311-13", "IX-2311-12", "IX-2311-14"], a="Stainless 1/2\":", ra="{x:IX-2311-13}."),
        T("what pressure is it rated for?", "pronoun",
          "stainless steel ball valve 1/2 inch DN15 pressure rating",
          q2=["IX-2311-13"], shown=["IX-2311-13"],
          a="Pressure:", ra="The stainless ball valve 1/2\" (IX-2311-13) is rated PN 63: 63 bar at 20 °C."),
        T("and the 2 inch one?", "ellipsis",
          "stainless steel ball valve 2 inch DN50 pressure rating",
          ef={"size": "2 in"}, q2=["IX-2311-18"], shown=["IX-2311-18"],
          a="2\":", ra="The 2\" version {x:IX-2311-18} is rated PN 40."),
        T("will the invoice include VAT?", "topic_switch",
          "invoice VAT reverse charge Austria VAT ID",
          q2=["svc-invoices"], shown=["svc-invoices"],
          a="VAT:", ra="No VAT is charged on deliveries to Austria when a valid VAT ID is stored (reverse charge)."),
    ]),
    S("t05", "test", "cleaning", CLE_CH, [
        T("QAC disinfectant cleaner concentrate", "self_contained",
          "QAC disinfectant cleaner concentrate quaternary ammonium",
          ef={"category": "disinfectant"}, q2=[Q(category="disinfectant", brand="Kratzer Chemie",
                                                   concentration_pct=2.5)],
          q1=[Q(category="disinfectant", brand="Kratzer Chemie", concentration_pct=5)],
          shown=["8230-01", "8230-05", "8231-01"],
          a="QAC concentrates:", ra="{x:8230-01}; also in 5 and 10 litres, and a high-strength 5 % version."),
        T("the third one in 10 litres", "ordinal",
          "Kratzer Chemie disinfectant cleaner concentrate QAC high strength 5% 10 litres",
          ef={"brand": "Kratzer Chemie", "concentration_pct": 5, "container_ml": 10000}, q2=["8231-10"],
          shown=["8231-10"], a="10 litres:", ra="{x:8231-10}."),
        T("4015522002728", "identifier", "4015522002728", ids=["4015522002728"], q2=["8240-10"],
          shown=["8240-10"], a="EAN 4015522002728:", ra="EAN 4015522002728 is the {x:8240-10}."),
        T("5 litres of it?", "pronoun",
          "CleanPro hydrogen peroxide disinfectant 3% 5 litres",
          ef={"category": "disinfectant", "brand": "CleanPro", "concentration_pct": 3, "container_ml": 5000},
          q2=["8240-05"], shown=["8240-05"], a="5 litres:", ra="{x:8240-05}."),
    ]),
    S("t06", "test", "fasteners", KEY_DE, [
        T("WX-6231-13", "identifier", "WX-6231-13", ids=["WX-6231-13"], q2=["WX-6231-13"], shown=["WX-6231-13"],
          a="Here is the article:", ra="WX-6231-13 is the {x:WX-6231-13}."),
        T("WX-6231-14", "identifier", "WX-6231-14", ids=["WX-6231-14"], q2=["WX-6231-14"], shown=["WX-6231-14"],
          a="Here is the article:", ra="WX-6231-14 is the {x:WX-6231-14}."),
        T("not A2 - A4 please", "changed_constraint",
          "socket head cap screw DIN 912 M8 x 40 mm stainless steel A4",
          ef={"category": "socket cap screw", "thread": "M8", "length_mm": 40, "material": A4},
          q2=["WX-6232-14"], shown=["WX-6232-14"], a="In A4:", ra="{x:WX-6232-14}."),
        T("will it go out today?", "topic_switch",
          "same day dispatch shipping Germany",
          q2=["svc-shipping-de"], q1=["svc-stock"], shown=["svc-shipping-de"],
          a="Dispatch:", ra="Yes, if it is in stock and you order by 2 pm on a working day it leaves the warehouse "
                            "the same day."),
    ]),
    S("t07", "test", "cleaning", CLE_DE, [
        T("cement remover for brick walls", "self_contained",
          "cement and mortar remover brick",
          ef={"category": "acid cleaner"}, q2=[Q(category="acid cleaner", brand="Kratzer Chemie",
                                                   concentration_pct=25)],
          shown=["8340-05", "8340-10", "8340-25"],
          a="Cement remover:", ra="{x:8340-05}, also in 10 and 25 litres."),
        T("the first one - how strong is it?", "ordinal",
          "Kratzer Chemie cement and mortar remover 5 litres concentration",
          ef={"container_ml": 5000}, q2=["8340-05"], shown=["8340-05"],
          a="Strength:", ra="The cement and mortar remover (8340-05) contains 25 % hydrochloric acid."),
        T("is it dangerous goods?", "pronoun",
          "Kratzer Chemie cement and mortar remover 25% hydrochloric acid dangerous goods",
          q2=["8340-05"], q1=["svc-hazardous"], shown=["8340-05", "svc-hazardous"],
          a="Yes:", ra="Yes, it is dangerous goods (ADR, limited quantity), shipped by road only."),
        T("what should I wear on my hands with it?", "pronoun",
          "chemical-resistant gloves hydrochloric acid",
          reset=True, ef={"category": "gloves"}, q2=[Q(category="gloves", material="nitrile", sales_unit="pair")],
          shown=["9440-08", "9440-09", "9440-10"],
          a="Gloves:", ra="Chemical-resistant nitrile gauntlets 9440 (EN ISO 374-1 type A), e.g. {x:9440-09}."),
    ]),
    S("t08", "test", "fasteners", IND_DE, [
        T("Sechskantschrauben M6 x 40 verzinkt", "self_contained",
          "hex bolt DIN 933 M6 x 40 mm galvanised",
          ef={"category": "hex bolt", "thread": "M6", "length_mm": 40, "material": GALV}, q2=["4703-33"],
          shown=["4703-33", "4701-33", "4702-33"], lang="de", a="M6 x 40:", ra="{x:4703-33}."),
        T("die erste in Edelstahl A2", "ordinal",
          "hex bolt DIN 933 M6 x 40 mm stainless steel A2",
          ef={"material": A2}, q2=["4701-33"], shown=["4701-33"], lang="de", a="In A2:", ra="{x:4701-33}."),
        T("4701-32", "identifier", "4701-32", ids=["4701-32"], q2=["4701-32"], shown=["4701-32"], lang="de",
          a="Artikel:", ra="4701-32 ist {x:4701-32}."),
        T("passende Muttern?", "ellipsis",
          "hex nut DIN 934 M6 stainless steel A2",
          ef={"category": "hex nut", "thread": "M6", "material": A2}, q2=["3101-43"], shown=["3101-43"],
          lang="de", a="Muttern M6:", ra="{x:3101-43}."),
    ]),
    S("t09", "test", "fittings", IND_CH, [
        T("IX-2441-13", "identifier", "IX-2441-13", ids=["IX-2441-13"], q2=["IX-2441-13"], shown=["IX-2441-13"],
          a="Here is the article:", ra="IX-2441-13 is the {x:IX-2441-13}."),
        T("is there a cheaper one?", "changed_constraint",
          "socket coupling 1/2 inch DN15 cheaper than EUR 6.23",
          ef={"category": "coupling", "size": "1/2 in", "price_net": ("lte", 6.22)}, q2=["2440-13"],
          shown=["2440-13"], a="Cheaper:", ra="The brass version {x:2440-13}."),
        T("and in 1 inch?", "pronoun",
          "brass socket coupling 1 inch DN25",
          ef={"size": "1 in", "material": BRASS, "price_net": None}, q2=["2440-15"], shown=["2440-15"],
          a="1\":", ra="{x:2440-15}."),
        T("how long to ship to us?", "topic_switch",
          "delivery time shipping to Switzerland",
          q2=["svc-shipping-ch"], shown=["svc-shipping-ch"],
          a="Switzerland:", ra="Orders ship within 1 working day and arrive in 3-5 working days including customs "
                               "clearance."),
    ]),
    S("t10", "test", "cleaning", CLE_NL, [
        T("PT-8360-25", "identifier", "PT-8360-25", ids=["PT-8360-25"], q2=["PT-8360-25"], shown=["PT-8360-25"],
          a="Here is the article:", ra="PT-8360-25 is the {x:PT-8360-25}."),
        T("the 200 litre drum of it", "pronoun",
          "PuraTec acidic foam cleaner food processing 20% 200 litre drum",
          ef={"category": "acid cleaner", "brand": "PuraTec", "concentration_pct": 20, "container_ml": 200000},
          q2=["PT-8360-20"], shown=["PT-8360-20"], a="200 litres:", ra="{x:PT-8360-20}."),
        T("do you charge extra for shipping that kind of thing?", "topic_switch",
          "hazardous goods shipping surcharge chemicals Netherlands",
          q2=["svc-hazardous"], shown=["svc-hazardous"],
          a="Surcharge:", ra="Yes, dangerous goods carry a surcharge of EUR 12.50 per shipment."),
        T("8310-10", "identifier", "8310-10", ids=["8310-10"], q2=["8310-10"], shown=["8310-10"],
          a="Here is the article:", ra="8310-10 is the {x:8310-10}."),
    ]),
    S("t11", "test", "fasteners", FULL_NL, [
        T("hex bolts M12 x 50, A2 or A4", "self_contained",
          "hex bolt DIN 933 M12 x 50 mm stainless steel A2 A4",
          ef={"category": "hex bolt", "thread": "M12", "length_mm": 50, "material": ("in", [A2, A4])},
          q2=["4731-32", "4732-32"], shown=["4731-32", "4732-32", "4733-32"],
          a="M12 x 50:", ra="{x:4731-32} and {x:4732-32}."),
        T("the third one - what's that per bolt?", "ordinal",
          "hex bolt DIN 933 M12 x 50 mm galvanised price",
          ef={"material": GALV}, q2=["4733-32"], shown=["4733-32"],
          a="Galvanised:", ra="{x:4733-32}, i.e. about EUR 0.11 per bolt."),
        T("and in 60?", "pronoun",
          "hex bolt DIN 933 M12 x 60 mm galvanised",
          ef={"length_mm": 60}, q2=["4733-33"], shown=["4733-33"], a="60 mm:", ra="{x:4733-33}."),
        T("4733-34", "identifier", "4733-34", ids=["4733-34"], q2=["4733-34"], shown=["4733-34"],
          a="Here is the article:", ra="4733-34 is the {x:4733-34}."),
    ]),
    S("t12", "test", "safety", KEY_DE, [
        T("9430-08", "identifier", "9430-08", ids=["9430-08"], q2=["9430-08"], shown=["9430-08"],
          a="Here is the article:", ra="9430-08 is the {x:9430-08}."),
        T("I need a latex-free alternative", "changed_constraint",
          "latex-free nitrile disposable gloves size M",
          ef={"category": "gloves", "material": "nitrile", "size": "M"},
          q2=["9410-08", "9420-08", "9411-08"], shown=["9410-08", "9420-08", "9411-08"],
          a="Nitrile, size M:", ra="{x:9410-08}, {x:9420-08} and {x:9411-08}."),
        T("the second one in S", "ordinal",
          "Protexa nitrile disposable gloves 0.12 mm size S",
          ef={"brand": "Protexa", "size": "S"}, q2=["9420-07"], shown=["9420-07"], a="Size S:",
          ra="{x:9420-07}."),
        T("and L?", "pronoun",
          "Protexa nitrile disposable gloves 0.12 mm size L",
          ef={"size": "L"}, q2=["9420-09"], shown=["9420-09"], a="Size L:", ra="{x:9420-09}."),
    ]),
    S("t13", "test", "fasteners", IND_AT, [
        T("M8 threaded rod in A2, 1 metre", "self_contained",
          "threaded rod DIN 976 M8 x 1000 mm stainless steel A2",
          ef={"category": "threaded rod", "thread": "M8", "material": A2}, q2=["3501-62"], shown=["3501-62"],
          a="M8 A2:", ra="{x:3501-62}."),
        T("can I buy it as single pieces?", "pronoun",
          "threaded rod M8 A2 single piece bundle",
          q2=["3501-62"], shown=["3501-62"],
          a="Sales unit:", ra="No, the M8 A2 rod 3501-62 is sold as a bundle of 5; M10 and larger are sold per piece."),
        T("the M10 one then", "ellipsis",
          "threaded rod DIN 976 M10 x 1000 mm stainless steel A2",
          ef={"thread": "M10"}, q2=["3501-63"], shown=["3501-63"], a="M10:", ra="{x:3501-63}."),
        T("when would it be delivered?", "topic_switch",
          "delivery time shipping to Austria",
          q2=["svc-shipping-at"], shown=["svc-shipping-at"],
          a="Austria:", ra="Orders by 12 noon ship the same working day; parcels arrive in 2-3 working days."),
    ]),
    S("t14", "test", "cleaning", CLE_DE, [
        T("hand disinfectant 4060391008067", "self_contained",
          "hand disinfectant 4060391008067",
          ids=["4060391008067"], q2=["PT-8220-01"], shown=["PT-8220-01"],
          a="EAN 4060391008067:", ra="EAN 4060391008067 is the {x:PT-8220-01}."),
        T("do you have it in a canister of 5 litres or more?", "changed_constraint",
          "PuraTec hand disinfectant gel canister 5 litres or more",
          ef={"category": "disinfectant", "brand": "PuraTec", "container_ml": ("gte", 5000)},
          q2=["PT-8220-05"], shown=["PT-8220-05"], a="5 litres:", ra="Yes, {x:PT-8220-05}; there is no larger size."),
        T("8240-05", "identifier", "8240-05", ids=["8240-05"], q2=["8240-05"], shown=["8240-05"],
          a="Here is the article:", ra="8240-05 is the {x:8240-05}."),
        T("and 10 litres?", "pronoun",
          "CleanPro hydrogen peroxide disinfectant 3% 10 litres",
          ef={"category": "disinfectant", "brand": "CleanPro", "concentration_pct": 3, "container_ml": 10000},
          q2=["8240-10"], shown=["8240-10"], a="10 litres:", ra="{x:8240-10}."),
    ]),
    S("t15", "test", "fasteners", IND_CH, [
        T("WX-6421-22 and WX-6421-23 please", "self_contained",
          "WX-6421-22 WX-6421-23",
          ids=["WX-6421-22", "WX-6421-23"], q2=["WX-6421-22", "WX-6421-23"],
          shown=["WX-6421-22", "WX-6421-23"], a="Both:", ra="{x:WX-6421-22} and {x:WX-6421-23}."),
        T("the second one in A4", "ordinal",
          "countersunk screw DIN 7991 M6 x 25 mm stainless steel A4",
          ef={"category": "countersunk screw", "thread": "M6", "length_mm": 25, "material": A4},
          q2=["WX-6422-23"], shown=["WX-6422-23"], a="In A4:", ra="{x:WX-6422-23}."),
        T("4045310006218", "identifier", "4045310006218", ids=["4045310006218"], q2=["WX-6422-21"],
          shown=["WX-6422-21"], a="EAN 4045310006218:", ra="EAN 4045310006218 is the {x:WX-6422-21}."),
        T("what's the minimum order for us?", "topic_switch",
          "minimum order value Switzerland",
          q2=["svc-minimum-order"], q1=["svc-shipping-ch"], shown=["svc-minimum-order"],
          a="Minimum order:", ra="For Switzerland the minimum order value is CHF 200."),
    ]),
    S("t16", "test", "safety", CLE_AT, [
        T("9420-09 or 9410-09 - which is thicker?", "self_contained",
          "9420-09 9410-09 nitrile gloves thickness",
          ids=["9420-09", "9410-09"], q2=["9420-09"], q1=["9410-09"], shown=["9420-09", "9410-09"],
          a="Thickness:", ra="9420-09 is 0.12 mm, 9410-09 is 0.10 mm: {x:9420-09} is thicker."),
        T("the thicker one in XL", "ellipsis",
          "Protexa nitrile disposable gloves 0.12 mm size XL",
          ef={"category": "gloves", "material": "nitrile", "brand": "Protexa", "size": "XL"}, q2=["9420-10"],
          shown=["9420-10"], a="XL:", ra="{x:9420-10}."),
        T("4068205005370", "identifier", "4068205005370", ids=["4068205005370"], q2=["9621-03"],
          shown=["9621-03"], a="EAN 4068205005370:", ra="EAN 4068205005370 is the {x:9621-03}."),
        T("with a valve?", "ellipsis",
          "Protexa FFP3 respirator mask with exhalation valve",
          ef={"category": "respiratory mask", "protection_class": "FFP3", "brand": "Protexa"}, q2=["9621-13"],
          shown=["9621-13"], a="With valve:", ra="{x:9621-13}."),
    ]),
]


# ================================================================ build and check
def filt_list(d: dict) -> list[dict]:
    out = []
    for k, v in d.items():
        if isinstance(v, tuple):
            out.append({"field": k, "op": v[0], "value": v[1]})
        else:
            out.append({"field": k, "op": "eq", "value": v})
    return out


def resolve(refs, acc, where, strict=True) -> list[str]:
    out = []
    for ref in refs:
        if isinstance(ref, Q):
            ids = ref.expand(acc)
            if not ids:
                raise AssertionError(f"{where}: criterion {ref.crit} selects nothing visible")
            out.extend(ids)
        else:
            r = doc(ref)
            if strict and not visible(r, acc):
                raise AssertionError(f"{where}: {ref} ({r['doc_id']}) not visible to account {acc}")
            out.append(r["doc_id"])
    return out


def build_session(spec: dict) -> dict:
    acc, sid = spec["acc"], spec["sid"]
    if not 3 <= len(spec["turns"]) <= 6:
        raise AssertionError(f"{sid}: {len(spec['turns'])} turns")
    prev: dict = {}
    typed_ids: set[str] = set()
    turns = []
    for i, t in enumerate(spec["turns"], start=1):
        where = f"{sid} turn {i}"
        qt = t["qt"]
        assert qt in QUERY_TYPES, where
        reset = t["reset"] if t["reset"] is not None else qt in ("topic_switch", "identifier")
        cur = {} if reset else dict(prev)
        for k, v in t["ef"].items():
            if v is None:
                cur.pop(k, None)
            else:
                cur[k] = v
        for k in cur:
            assert k in PREFERENCE, f"{where}: {k} is not a preference field"
        q2 = resolve(t["q2"], acc, where)
        q1 = [d for d in resolve(t["q1"], acc, where) if d not in q2]
        qrels = {d: 2 for d in q2}
        qrels.update({d: 1 for d in q1})
        if t["ans"] == "ANSWERABLE":
            assert q2, f"{where}: answerable turn without a grade-2 document"
        shown_refs = t["shown"] if t["shown"] is not None else t["q2"][:3]
        shown = [{"doc_id": d, "name": DOCS[d]["title"]} for d in resolve(shown_refs, acc, where)]
        # identifiers: verbatim in the corpus, typed by the user, kept by the rewrite
        for ident in t["ids"]:
            assert ident in BY_PART or ident in BY_EAN, f"{where}: identifier {ident} not in corpus"
            assert ident in t["rw"], f"{where}: rewrite drops identifier {ident}"
        typed_ids |= {x for x in re.findall(r"[A-Z]{0,2}-?\d{4}-\d{2}|\d{13}", t["u"])}
        for ident in t["ids"]:
            assert ident in typed_ids, f"{where}: identifier {ident} never typed by the user"
        if qt == "identifier":
            assert t["u"].strip() in t["ids"], f"{where}: identifier turn must be only an identifier"
        if i >= 2 and qt not in ("identifier", "self_contained"):
            assert t["rw"].lower() != t["u"].lower(), where
        labels = {
            "qrels": qrels, "query_type": qt, "language": t["lang"], "answerability": t["ans"],
            "reference_rewrite": t["rw"], "expected_filters": filt_list(cur), "identifiers": t["ids"],
            "reference_answer": expand_text(t["ra"]),
        }
        turns.append({
            "user": t["u"],
            "state": {"filters": filt_list(prev)},
            "assistant": {"answer": expand_text(t["a"]), "shown": shown},
            "labels": labels,
        })
        prev = cur
    return {"session_id": f"b2b-{sid}", "domain": spec["domain"], "account": acc, "turns": turns}


def main() -> None:
    out = {"main": [], "test": []}
    for spec in SESSIONS:
        out[spec["split"]].append(build_session(spec))
    for split, rows in out.items():
        with OUT[split].open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    n = {k: len(v) for k, v in out.items()}
    print(f"wrote {n['main']} main and {n['test']} test sessions")


if __name__ == "__main__":
    main()
