"""Build corpus.jsonl of the b2b-shop eval set: a fictional B2B catalogue (fasteners, fittings,
cleaning chemicals, safety gear) plus a handful of service pages.

Deterministic: a fixed seed, no clock, no network. Run from anywhere:

    python eval_sets/b2b-shop/build_catalogue.py

Part numbers: `BBBB-SS` (4-digit line number, hyphen, 2-digit variant). Lines are numbered so that
near misses exist on purpose: `4711-32` (hex bolt M8 x 30, A2) and `4712-32` (the same in A4) and
`4711-33` (M8 x 40, A2) are three different products. Two brands use a supplier prefix
(`WX-` Wuerx, `IX-` Inoxa, `PT-` PuraTec). EAN-13 codes are GS1 company prefix + sequential item
reference + a computed check digit, so consecutive products of a brand have near-miss EANs too.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20240611
OUT = Path(__file__).resolve().parent / "corpus.jsonl"

ASSORTMENTS = ["A-industrial", "A-cleaning", "A-full"]
PRICE_LISTS = ["PL-DE-STD", "PL-DE-KEY", "PL-AT-STD", "PL-CH-STD", "PL-NL-STD"]
COUNTRIES = ["DE", "AT", "CH", "NL"]

# GS1 company prefixes (fictional) per brand
GS1 = {
    "Fixmann": "4031287",
    "Wuerx": "4045310",
    "Steelco": "4062719",
    "NordFix": "4058842",
    "Aquaflow": "4026601",
    "Inoxa": "4039975",
    "Hydrotec": "4051153",
    "CleanPro": "4015522",
    "Kratzer Chemie": "4047018",
    "PuraTec": "4060391",
    "Safehand": "4033364",
    "Protexa": "4068205",
}
PREFIX = {"Wuerx": "WX-", "Inoxa": "IX-", "PuraTec": "PT-"}


def ean13_check(first12: str) -> int:
    """GS1 check digit: weights 1,3,1,3,... from the left over 12 digits."""
    assert len(first12) == 12 and first12.isdigit()
    s = sum(int(d) * (3 if i % 2 else 1) for i, d in enumerate(first12))
    return (10 - s % 10) % 10


_item_ref: dict[str, int] = {}


def next_ean(brand: str, rng: random.Random) -> str:
    # sequential item references with small gaps: neighbours differ in one or two digits
    ref = _item_ref.get(brand, rng.randrange(100, 900))
    ref += rng.choice([1, 1, 1, 2])
    _item_ref[brand] = ref
    body = GS1[brand] + f"{ref:05d}"
    return body + str(ean13_check(body))


def money(x: float) -> float:
    return round(x + 1e-9, 2)


def fmt_eur(x: float, rng: random.Random) -> str:
    forms = [f"EUR {x:.2f}", f"{x:.2f} EUR", f"€{x:.2f}", f"{x:.2f} €".replace(".", ",")]
    return rng.choice(forms)


products: list[dict] = []


def add(rng: random.Random, *, family: str, category: str, title: str, body: str, brand: str,
        part: str, price: float, unit: str, purpose: str, meta: dict, hazardous: bool = False):
    ean = next_ean(brand, rng)
    price = money(price)
    text = (f"{title}. {body} Brand: {brand}. Part number {part}, EAN {ean}. "
            f"Net price {fmt_eur(price, rng)} per {unit}. {purpose}")
    if hazardous:
        text += (" Dangerous goods (ADR, limited quantity): shipped by road only, not to Switzerland;"
                 " safety data sheet on request.")
    md = {"family": family, "category": category, "brand": brand, "part_number": part, "ean": ean,
          "price_net": price, "sales_unit": unit}
    md.update(meta)
    products.append({"title": title, "text": text, "metadata": md, "_hazardous": hazardous})


# ---------------------------------------------------------------- fasteners
THREADS = ["M4", "M5", "M6", "M8", "M10", "M12", "M16"]
PITCH = {"M4": 0.7, "M5": 0.8, "M6": 1.0, "M8": 1.25, "M10": 1.5, "M12": 1.75, "M16": 2.0}
WRENCH = {"M4": 7, "M5": 8, "M6": 10, "M8": 13, "M10": 16, "M12": 18, "M16": 24}
THREAD_PRICE = {"M4": 2.2, "M5": 2.8, "M6": 3.6, "M8": 6.2, "M10": 10.5, "M12": 16.0, "M16": 34.0}
MAT_FACTOR = {"stainless steel A2": 1.0, "stainless steel A4": 1.55, "galvanised steel": 0.45,
              "brass": 1.9}
MAT_NOTE = {
    "stainless steel A2": "Stainless steel A2 (1.4301 / AISI 304), rust-free for indoor and outdoor use",
    "stainless steel A4": "Stainless steel A4 (1.4401 / AISI 316), acid- and seawater-resistant",
    "galvanised steel": "Steel property class 8.8, zinc plated (galvanised), for dry indoor use",
    "brass": "Brass CuZn39Pb3, non-magnetic, conductive and decorative",
}
MAT_SHORT = {"stainless steel A2": "A2", "stainless steel A4": "A4", "galvanised steel": "galvanised",
             "brass": "brass"}
MAT_CODE = {"stainless steel A2": 1, "stainless steel A4": 2, "galvanised steel": 3, "brass": 4}


def pack_size(thread: str) -> int:
    return {"M4": 200, "M5": 200, "M6": 100, "M8": 100, "M10": 50, "M12": 50, "M16": 25}[thread]


def fastener_brand(material: str, default: str) -> str:
    if material == "galvanised steel":
        return "Steelco"
    if material == "brass":
        return "NordFix"
    return default


def build_fasteners(rng: random.Random):
    # hex bolts DIN 933 ----------------------------------------------------
    lengths = {"M6": [20, 30, 40], "M8": [20, 30, 40, 50, 60], "M10": [30, 40, 50, 60, 80],
               "M12": [40, 50, 60, 80], "M16": [50, 60, 80, 100]}
    for ti, thread in enumerate(["M6", "M8", "M10", "M12", "M16"]):
        for mat in ["stainless steel A2", "stainless steel A4", "galvanised steel"]:
            base = 4700 + 10 * ti + MAT_CODE[mat]
            brand = fastener_brand(mat, "Fixmann")
            for li, L in enumerate(lengths[thread]):
                part = f"{PREFIX.get(brand, '')}{base}-{31 + li}"
                n = pack_size(thread)
                price = THREAD_PRICE[thread] * (0.6 + L / 50) * MAT_FACTOR[mat] * n / 100 * rng.uniform(0.95, 1.05)
                title = f"Hex bolt DIN 933 {thread} x {L} mm, {MAT_SHORT[mat]}, pack of {n}"
                body = (f"Hexagon head bolt to DIN 933 / ISO 4017, fully threaded, thread {thread} "
                        f"(pitch {PITCH[thread]} mm), length {L} mm, width across flats {WRENCH[thread]} mm. "
                        f"{MAT_NOTE[mat]}.")
                add(rng, family="fasteners", category="hex bolt", title=title, body=body, brand=brand,
                    part=part, price=price, unit=f"pack of {n}",
                    purpose="For machine frames, steel construction, brackets and general assembly.",
                    meta={"material": mat, "thread": thread, "length_mm": L, "pack_qty": n})

    # socket head cap screws DIN 912 (Wuerx, prefix WX-) --------------------
    lengths = {"M4": [10, 16, 20], "M5": [10, 16, 20, 25], "M6": [16, 20, 25, 30],
               "M8": [20, 25, 30, 40], "M10": [25, 30, 40, 50]}
    for ti, thread in enumerate(["M4", "M5", "M6", "M8", "M10"]):
        for mat in ["stainless steel A2", "stainless steel A4"]:
            base = 6200 + 10 * ti + MAT_CODE[mat]
            brand = "Wuerx"
            for li, L in enumerate(lengths[thread]):
                part = f"WX-{base}-{11 + li}"
                n = pack_size(thread)
                price = THREAD_PRICE[thread] * 1.3 * (0.6 + L / 40) * MAT_FACTOR[mat] * n / 100 * rng.uniform(0.95, 1.05)
                title = f"Socket head cap screw DIN 912 {thread} x {L} mm, {MAT_SHORT[mat]}, pack of {n}"
                body = (f"Cylinder head screw with hexagon socket (Allen key) to DIN 912 / ISO 4762, "
                        f"thread {thread}, length {L} mm. {MAT_NOTE[mat]}.")
                add(rng, family="fasteners", category="socket cap screw", title=title, body=body, brand=brand,
                    part=part, price=price, unit=f"pack of {n}",
                    purpose="For tool making, machine building and where the head must sit flush in a counterbore.",
                    meta={"material": mat, "thread": thread, "length_mm": L, "pack_qty": n})

    # countersunk screws DIN 7991 (Wuerx) ------------------------------------
    lengths = {"M4": [10, 16, 20], "M5": [12, 16, 20], "M6": [16, 20, 25], "M8": [20, 25, 30]}
    for ti, thread in enumerate(["M4", "M5", "M6", "M8"]):
        for mat in ["stainless steel A2", "stainless steel A4"]:
            base = 6400 + 10 * ti + MAT_CODE[mat]
            for li, L in enumerate(lengths[thread]):
                part = f"WX-{base}-{21 + li}"
                n = pack_size(thread)
                price = THREAD_PRICE[thread] * 1.2 * (0.6 + L / 40) * MAT_FACTOR[mat] * n / 100 * rng.uniform(0.95, 1.05)
                title = f"Countersunk screw DIN 7991 {thread} x {L} mm, {MAT_SHORT[mat]}, pack of {n}"
                body = (f"Countersunk flat head screw with hexagon socket to DIN 7991 / ISO 10642, 90 degree head, "
                        f"thread {thread}, length {L} mm. {MAT_NOTE[mat]}.")
                add(rng, family="fasteners", category="countersunk screw", title=title, body=body, brand="Wuerx",
                    part=part, price=price, unit=f"pack of {n}",
                    purpose="For flush surfaces: hinges, guards, sheet metal covers.",
                    meta={"material": mat, "thread": thread, "length_mm": L, "pack_qty": n})

    # hex nuts DIN 934 ----------------------------------------------------
    for ti, thread in enumerate(THREADS):
        for mat in ["stainless steel A2", "stainless steel A4", "galvanised steel", "brass"]:
            brand = fastener_brand(mat, "Fixmann")
            part = f"{3100 + MAT_CODE[mat]}-{41 + ti}"
            n = pack_size(thread) * 2 if thread in ("M4", "M5", "M6", "M8") else pack_size(thread)
            price = THREAD_PRICE[thread] * 0.35 * MAT_FACTOR[mat] * n / 100 * rng.uniform(0.95, 1.05)
            title = f"Hex nut DIN 934 {thread}, {MAT_SHORT[mat]}, pack of {n}"
            body = (f"Hexagon nut to DIN 934 / ISO 4032, thread {thread} (pitch {PITCH[thread]} mm), "
                    f"width across flats {WRENCH[thread]} mm. {MAT_NOTE[mat]}.")
            add(rng, family="fasteners", category="hex nut", title=title, body=body, brand=brand,
                part=part, price=price, unit=f"pack of {n}",
                purpose=f"Matches {thread} bolts, screws and threaded rods.",
                meta={"material": mat, "thread": thread, "pack_qty": n})

    # washers DIN 125 -----------------------------------------------------
    inner = {"M4": 4.3, "M5": 5.3, "M6": 6.4, "M8": 8.4, "M10": 10.5, "M12": 13.0, "M16": 17.0}
    for ti, thread in enumerate(THREADS):
        for mat in ["stainless steel A2", "stainless steel A4", "galvanised steel"]:
            brand = fastener_brand(mat, "Fixmann")
            part = f"{3300 + MAT_CODE[mat]}-{41 + ti}"
            n = pack_size(thread) * 2
            price = THREAD_PRICE[thread] * 0.18 * MAT_FACTOR[mat] * n / 100 * rng.uniform(0.95, 1.05)
            title = f"Flat washer DIN 125 for {thread} ({inner[thread]} mm), {MAT_SHORT[mat]}, pack of {n}"
            body = (f"Plain washer form A to DIN 125 / ISO 7089, inner diameter {inner[thread]} mm for {thread} "
                    f"bolts. {MAT_NOTE[mat]}.")
            add(rng, family="fasteners", category="washer", title=title, body=body, brand=brand,
                part=part, price=price, unit=f"pack of {n}",
                purpose="Spreads the load under bolt heads and nuts, protects the surface.",
                meta={"material": mat, "thread": thread, "pack_qty": n})

    # threaded rods DIN 976, 1 m ------------------------------------------
    for ti, thread in enumerate(["M6", "M8", "M10", "M12", "M16"]):
        for mat in ["stainless steel A2", "stainless steel A4", "galvanised steel"]:
            brand = fastener_brand(mat, "Fixmann")
            part = f"{3500 + MAT_CODE[mat]}-{61 + ti}"
            n = 5 if thread in ("M6", "M8") else 1
            price = THREAD_PRICE[thread] * 0.9 * MAT_FACTOR[mat] * n * rng.uniform(0.95, 1.05)
            unit = f"bundle of {n}" if n > 1 else "piece"
            title = f"Threaded rod DIN 976 {thread} x 1000 mm, {MAT_SHORT[mat]}" + (f", bundle of {n}" if n > 1 else "")
            body = (f"Threaded rod (studding) to DIN 976-1, thread {thread}, length 1000 mm (1 m), cut to length "
                    f"on request. {MAT_NOTE[mat]}.")
            add(rng, family="fasteners", category="threaded rod", title=title, body=body, brand=brand,
                part=part, price=price, unit=unit,
                purpose="For suspensions, pipe hangers, anchoring and custom-length bolts.",
                meta={"material": mat, "thread": thread, "length_mm": 1000, "pack_qty": n})


# ---------------------------------------------------------------- fittings
SIZES = ["1/4 in", "3/8 in", "1/2 in", "3/4 in", "1 in", "1 1/4 in", "1 1/2 in", "2 in"]
DN = {"1/4 in": 8, "3/8 in": 10, "1/2 in": 15, "3/4 in": 20, "1 in": 25, "1 1/4 in": 32, "1 1/2 in": 40, "2 in": 50}
SIZE_PRICE = {"1/4 in": 1.0, "3/8 in": 1.15, "1/2 in": 1.35, "3/4 in": 1.8, "1 in": 2.6, "1 1/4 in": 3.9,
              "1 1/2 in": 5.0, "2 in": 7.4}
FIT_MAT = {
    "brass": ("Aquaflow", "Brass CW617N, nickel-plated, BSP parallel thread (G) to ISO 228"),
    "stainless steel A4": ("Inoxa", "Stainless steel 1.4408 (AISI 316), BSP thread, for aggressive media and food"),
    "galvanised steel": ("Hydrotec", "Malleable cast iron, hot-dip galvanised, BSP taper thread (R/Rp) to EN 10226"),
    "PVC-U": ("Hydrotec", "PVC-U, female thread both sides, for cold water and chemicals up to 45 °C"),
}


def inch_text(size: str, rng: random.Random) -> str:
    s = size.replace(" in", "")
    return rng.choice([f'{s}"', f"{s} inch", f"G {s}", f'{s}"'])


def rating(kind: str, mat: str, size: str) -> int:
    big = DN[size] >= 32
    mid = 20 <= DN[size] <= 25
    if mat == "brass":
        return (25 if big else 30 if mid else 40) if kind == "ball valve" else 25
    if mat == "stainless steel A4":
        return (40 if big else 63) if kind == "ball valve" else 40
    if mat == "galvanised steel":
        return 25
    return 10 if big else 16  # PVC-U


def build_fittings(rng: random.Random):
    kinds = [
        ("ball valve", 2310, "Ball valve, full bore, lever handle", "Shut-off valve for water, compressed air and oil lines.", 9.0),
        ("elbow", 2420, "Elbow 90° female/female", "Changes direction in threaded pipework.", 2.2),
        ("tee", 2430, "Tee equal, female", "Branches a threaded pipe line.", 2.9),
        ("coupling", 2440, "Socket coupling female/female", "Joins two threaded pipes of the same size.", 1.7),
    ]
    mats = ["brass", "stainless steel A4", "galvanised steel", "PVC-U"]
    for kind, kbase, kname, purpose, kprice in kinds:
        for mi, mat in enumerate(mats):
            if kind == "ball valve" and mat == "galvanised steel":
                continue  # no galvanised ball valves
            if kind != "ball valve" and mat == "PVC-U":
                continue  # PVC only as ball valves
            brand, note = FIT_MAT[mat]
            base = kbase + mi
            for si, size in enumerate(SIZES):
                part = f"{PREFIX.get(brand, '')}{base}-{11 + si}"
                bar = rating(kind, mat, size)
                mf = {"brass": 1.0, "stainless steel A4": 2.6, "galvanised steel": 0.55, "PVC-U": 0.7}[mat]
                price = kprice * SIZE_PRICE[size] * mf * rng.uniform(0.95, 1.05)
                ms = {"brass": "brass", "stainless steel A4": "stainless 316", "galvanised steel": "galvanised",
                      "PVC-U": "PVC-U"}[mat]
                title = f"{kname} {size.replace(' in', '')}\" (DN{DN[size]}), {ms}, PN {bar}"
                body = (f"{kname}, size {inch_text(size, rng)} / DN{DN[size]}. Maximum operating pressure {bar} bar "
                        f"(PN {bar}) at 20 °C. {note}.")
                add(rng, family="fittings", category=kind, title=title, body=body, brand=brand, part=part,
                    price=price, unit="piece", purpose=purpose,
                    meta={"material": mat, "size": size, "dn": DN[size], "pressure_rating_bar": bar})


# ---------------------------------------------------------------- cleaning chemicals
VOLUME_FORMS = {
    500: ["500 ml", "0.5 l", "500ml"],
    750: ["750 ml", "0.75 l", "750ml spray bottle"],
    1000: ["1 l", "1L", "1000 ml", "1 litre"],
    5000: ["5 l", "5L", "5000 ml", "5 litres", "5-litre canister"],
    10000: ["10 l", "10L", "10 litres", "10000 ml"],
    25000: ["25 l", "25 L", "25 litres", "25-litre canister"],
    200000: ["200 l drum", "200 litres"],
}
VOL_CODE = {500: "00", 750: "07", 1000: "01", 5000: "05", 10000: "10", 25000: "25", 200000: "20"}
VOL_PRICE = {500: 0.55, 750: 0.7, 1000: 1.0, 5000: 3.9, 10000: 7.2, 25000: 16.5, 200000: 118.0}

CLEANING_LINES = [
    # base, brand, category, name, concentration %, active, volumes, price per litre, hazardous, purpose
    (8110, "CleanPro", "degreaser", "Alkaline degreaser concentrate", 20, "potassium hydroxide and surfactants",
     [1000, 5000, 10000, 25000], 6.4, False,
     "Removes oil, grease and cutting fluid from metal parts, machines and workshop floors; dilute 1:10 to 1:50."),
    (8111, "CleanPro", "degreaser", "Alkaline degreaser concentrate, extra strong", 35, "potassium hydroxide and surfactants",
     [5000, 10000, 25000], 8.9, True,
     "For burnt-on grease and heavy soiling in food processing and engine overhaul; dilute 1:20 to 1:100."),
    (8130, "Kratzer Chemie", "degreaser", "Heavy-duty industrial degreaser", 15, "non-ionic surfactants and glycol ether",
     [1000, 5000, 10000, 25000], 5.2, False,
     "Cleans machine tools, conveyors and vehicles; ready to dilute, low foaming for spray washers."),
    (8150, "PuraTec", "degreaser", "Citrus degreaser, solvent-free", 10, "orange terpenes",
     [750, 1000, 5000, 10000], 9.5, False,
     "Biodegradable degreaser for hands-on cleaning of tools, benches and painted surfaces."),
    (8160, "Kratzer Chemie", "degreaser", "Water-based parts cleaner", 5, "mild alkaline surfactants",
     [5000, 10000, 25000, 200000], 3.6, False,
     "For parts washers and ultrasonic baths; gentle on aluminium and brass."),
    (8170, "CleanPro", "degreaser", "Food-safe degreaser (NSF A1)", 12, "sodium carbonate and surfactants",
     [1000, 5000, 10000, 25000], 7.1, False,
     "Approved for surfaces in food and beverage plants; rinse with potable water."),
    (8210, "CleanPro", "disinfectant", "Surface disinfectant, alcohol-based, ready to use", 70, "ethanol",
     [750, 1000, 5000, 10000], 7.8, True,
     "Quick disinfection of small surfaces, tools and touchpoints; contact time 30 s; flammable."),
    (8220, "PuraTec", "disinfectant", "Hand disinfectant gel", 80, "ethanol",
     [500, 1000, 5000], 11.5, True,
     "Hygienic hand disinfection to EN 1500 for workshops, kitchens and offices."),
    (8230, "Kratzer Chemie", "disinfectant", "Disinfectant cleaner concentrate (QAC)", 2.5, "quaternary ammonium compounds",
     [1000, 5000, 10000], 8.2, False,
     "Cleans and disinfects floors and surfaces in one step; dilute 0.5 % to 2 %; aldehyde-free."),
    (8231, "Kratzer Chemie", "disinfectant", "Disinfectant cleaner concentrate (QAC), high strength", 5, "quaternary ammonium compounds",
     [1000, 5000, 10000], 10.9, False,
     "For food processing and sanitary areas with high germ load; dilute 0.25 % to 1 %."),
    (8240, "CleanPro", "disinfectant", "Hydrogen peroxide disinfectant", 3, "hydrogen peroxide",
     [1000, 5000, 10000], 6.9, False,
     "Residue-free disinfection of food contact surfaces and cold rooms."),
    (8241, "CleanPro", "disinfectant", "Hydrogen peroxide disinfectant, concentrate", 7.5, "hydrogen peroxide",
     [1000, 5000, 10000], 9.4, True,
     "Concentrate for fogging and CIP disinfection; dilute before use."),
    (8250, "Kratzer Chemie", "disinfectant", "Instrument disinfectant", 4, "glucoprotamin",
     [1000, 5000], 14.2, False,
     "Immersion disinfection of tools, measuring instruments and reusable PPE."),
    (8310, "CleanPro", "acid cleaner", "Phosphoric acid descaler", 15, "phosphoric acid",
     [1000, 5000, 10000, 25000], 5.9, False,
     "Removes limescale, rust film and cement residue from stainless steel, tiles and heat exchangers."),
    (8311, "CleanPro", "acid cleaner", "Phosphoric acid descaler", 30, "phosphoric acid",
     [1000, 5000, 10000, 25000], 7.6, True,
     "Heavy-duty descaling of boilers, dishwashers and cooling circuits; dilute 1:5 to 1:20."),
    (8320, "Kratzer Chemie", "acid cleaner", "Citric acid cleaner", 10, "citric acid",
     [1000, 5000, 10000], 5.4, False,
     "Mild descaler for coffee machines, kettles and sanitary fittings; biodegradable."),
    (8330, "PuraTec", "acid cleaner", "Sanitary acid cleaner", 12, "amidosulfonic acid",
     [750, 1000, 5000, 10000], 6.6, False,
     "Daily cleaning of washrooms, urinals and showers; removes urine scale and lime."),
    (8340, "Kratzer Chemie", "acid cleaner", "Cement and mortar remover", 25, "hydrochloric acid",
     [5000, 10000, 25000], 4.8, True,
     "Removes cement film, efflorescence and rust from concrete, brick and tools; not for marble or galvanised surfaces."),
    (8360, "PuraTec", "acid cleaner", "Acidic foam cleaner for food processing", 20, "phosphoric and nitric acid",
     [5000, 10000, 25000, 200000], 6.1, True,
     "Foam cleaning of stainless steel lines in dairies and breweries; removes milkstone and beer stone."),
]


def build_cleaning(rng: random.Random):
    for base, brand, cat, name, conc, active, vols, ppl, haz, purpose in CLEANING_LINES:
        for v in vols:
            written = rng.choice(VOLUME_FORMS[v])
            part = f"{PREFIX.get(brand, '')}{base}-{VOL_CODE[v]}"
            price = ppl * VOL_PRICE[v] * rng.uniform(0.96, 1.04)
            conc_txt = f"{conc:g} %" if rng.random() < 0.5 else f"{conc:g}%"
            title = f"{brand} {name} {conc_txt}, {written}"
            body = (f"{name} with {conc_txt} {active} (active content). Container: {written}. "
                    f"{'Hazardous: wear gloves and goggles.' if haz else 'Not classified as dangerous goods for transport.'}")
            add(rng, family="cleaning", category=cat, title=title, body=body, brand=brand, part=part,
                price=price, unit="container",
                purpose=purpose, hazardous=haz,
                meta={"container_ml": v, "container_written": written, "concentration_pct": conc,
                      "hazardous_goods": haz})


# ---------------------------------------------------------------- safety gear
def build_safety(rng: random.Random):
    glove_lines = [
        (9410, "Safehand", "nitrile", "Nitrile disposable gloves, powder-free, blue, 0.10 mm", "box of 100", 7.9,
         ["S", "M", "L", "XL"], "Splash protection in workshops, labs and food handling; EN ISO 374-5, EN 455."),
        (9411, "Safehand", "nitrile", "Nitrile disposable gloves, black, extra thick 0.20 mm", "box of 50", 9.6,
         ["S", "M", "L", "XL"], "Tear-resistant for mechanics and cleaning with chemicals; EN ISO 374-1 type B."),
        (9420, "Protexa", "nitrile", "Nitrile disposable gloves, powder-free, blue, 0.12 mm", "box of 100", 8.7,
         ["S", "M", "L", "XL"], "Everyday disposable glove for industry and cleaning; latex-free, EN ISO 374-5."),
        (9430, "Safehand", "latex", "Latex disposable gloves, powder-free, natural", "box of 100", 6.4,
         ["S", "M", "L", "XL"], "High tactility for fine assembly work; contains natural rubber latex (allergy risk)."),
        (9431, "Protexa", "latex", "Latex examination gloves, lightly powdered", "box of 100", 5.6,
         ["S", "M", "L", "XL"], "Economic disposable glove for short tasks; not for use with solvents."),
        (9440, "Safehand", "nitrile", "Chemical-resistant nitrile gauntlets, 33 cm, green, flock-lined", "pair", 3.9,
         ["7", "8", "9", "10", "11"], "Reusable chemical protection against acids, alkalis and oils; EN ISO 374-1 type A."),
        (9450, "Protexa", "HPPE nitrile-coated", "Cut-resistant gloves level C, HPPE with nitrile foam coating", "pair", 6.8,
         ["7", "8", "9", "10", "11"], "For handling sheet metal, glass and sharp parts; EN 388 4X42C."),
    ]
    size_code = {"S": "07", "M": "08", "L": "09", "XL": "10", "7": "07", "8": "08", "9": "09", "10": "10", "11": "11"}
    for base, brand, mat, name, unit, price0, sizes, purpose in glove_lines:
        for sz in sizes:
            part = f"{base}-{size_code[sz]}"
            size_txt = f"size {sz}" if not sz.isdigit() else f"size {sz} ({ {'7': 'S', '8': 'M', '9': 'L', '10': 'XL', '11': 'XXL'}[sz] })"
            title = f"{name}, {size_txt}, {unit}"
            body = f"{name}. Material: {mat}. {size_txt.capitalize()}. Sold per {unit}."
            add(rng, family="safety", category="gloves", title=title, body=body, brand=brand, part=part,
                price=price0 * rng.uniform(0.97, 1.03), unit=unit, purpose=purpose,
                meta={"material": mat, "size": sz})

    goggles = [
        ("9510-01", "Safehand", "Safety spectacles, clear lens, anti-scratch", 4.2, "EN 166 1 F; general workshop use."),
        ("9510-02", "Safehand", "Safety spectacles, grey tinted lens, UV 400", 4.9, "EN 166 / EN 172; outdoor work and glare."),
        ("9511-01", "Protexa", "Over-glasses safety spectacles for prescription wearers", 6.5, "Fits over corrective glasses; EN 166 1 F."),
        ("9512-01", "Protexa", "Chemical splash goggles, indirect vent, anti-fog", 9.8, "EN 166 3 4 B; protects against liquid droplets and splashes of acids and alkalis."),
        ("9512-02", "Safehand", "Full-vision goggles, direct vent, anti-fog", 7.4, "EN 166 B; dust and impact protection for grinding."),
        ("9513-01", "Protexa", "Face shield with brow guard, polycarbonate visor", 14.5, "EN 166 3 B; full face splash protection when decanting chemicals."),
    ]
    for part, brand, name, price, purpose in goggles:
        add(rng, family="safety", category="eye protection", title=f"{name}", body=f"{name}. Lens material: polycarbonate.",
            brand=brand, part=part, price=price * rng.uniform(0.97, 1.03), unit="piece", purpose=purpose,
            meta={"material": "polycarbonate"})

    masks = [
        ("9610-02", "Safehand", "FFP2", False, 20, 11.9),
        ("9610-12", "Safehand", "FFP2", True, 10, 12.9),
        ("9611-03", "Safehand", "FFP3", False, 20, 24.5),
        ("9611-13", "Safehand", "FFP3", True, 10, 19.8),
        ("9620-02", "Protexa", "FFP2", False, 20, 10.9),
        ("9620-12", "Protexa", "FFP2", True, 10, 12.2),
        ("9621-03", "Protexa", "FFP3", False, 10, 13.6),
        ("9621-13", "Protexa", "FFP3", True, 10, 18.9),
    ]
    for part, brand, cls, valve, n, price in masks:
        v = "with exhalation valve" if valve else "without valve"
        limit = "10 x OEL" if cls == "FFP2" else "30 x OEL"
        name = f"Respirator mask {cls} {v}, folding, box of {n}"
        add(rng, family="safety", category="respiratory mask", title=name,
            body=f"Particle filtering half mask {cls} to EN 149:2001+A1:2009, NR, {v}; protects up to {limit}.",
            brand=brand, part=part, price=price * rng.uniform(0.97, 1.03), unit=f"box of {n}",
            purpose="For dust, fine particles and aerosols when grinding, sanding or spraying; not for gases or vapours.",
            meta={"material": "polypropylene", "protection_class": cls, "pack_qty": n})

    ears = [
        ("9710-01", "Protexa", "Foam ear plugs, SNR 37 dB, box of 200 pairs", 21.5, "PU foam"),
        ("9710-02", "Protexa", "Foam ear plugs refill for dispenser, SNR 35 dB, 500 pairs", 44.0, "PU foam"),
        ("9711-01", "Safehand", "Banded ear plugs, SNR 24 dB", 3.4, "PU foam"),
        ("9720-30", "Safehand", "Earmuffs, headband, SNR 30 dB", 18.9, "ABS"),
        ("9720-33", "Safehand", "Earmuffs, headband, SNR 33 dB, high attenuation", 27.5, "ABS"),
        ("9721-01", "Protexa", "Helmet-mounted earmuffs, SNR 29 dB", 24.9, "ABS"),
    ]
    for part, brand, name, price, mat in ears:
        add(rng, family="safety", category="ear protection", title=name,
            body=f"{name}. Hearing protection to EN 352. Material: {mat}.", brand=brand, part=part,
            price=price * rng.uniform(0.97, 1.03), unit="pack" if "plugs" in name else "piece",
            purpose="For noisy workplaces from 80 dB(A): grinding, sawing, compressors.",
            meta={"material": mat})


# ---------------------------------------------------------------- entitlements
def entitle(rng: random.Random, p: dict) -> None:
    md = p["metadata"]
    fam = md["family"]
    if fam in ("fasteners", "fittings"):
        assortment = ["A-industrial", "A-full"]
    elif fam == "cleaning":
        assortment = ["A-cleaning", "A-full"]
    else:  # safety gear: ear protection is industrial only
        assortment = ["A-industrial", "A-full"] if md["category"] == "ear protection" else ASSORTMENTS[:]
    price_lists = ["PL-DE-STD", "PL-DE-KEY"]
    if rng.random() < 0.9:
        price_lists.append("PL-AT-STD")
    if md.get("material") != "PVC-U" and rng.random() < 0.85:
        price_lists.append("PL-CH-STD")
    if md.get("material") != "brass" and rng.random() < 0.9:
        price_lists.append("PL-NL-STD")
    ships = ["DE", "AT", "NL"]
    if not p["_hazardous"]:
        ships.insert(2, "CH")
    if rng.random() < 0.05:
        ships.remove("NL")
    md["assortment"] = assortment
    md["price_list"] = price_lists
    md["ship_countries"] = ships


SERVICE = [
    ("svc-shipping-de", "Shipping times to Germany",
     "Delivery times for orders shipped to Germany (DE). Orders placed by 2 pm on a working day leave our "
     "warehouse the same day; standard parcel delivery takes 1-2 working days, pallets 2-3 working days. "
     "Express next-day delivery before 10 am is available for parcels. Free shipping from EUR 150 net order value, "
     "otherwise EUR 6.90 per parcel. When will my order ship: same day if in stock."),
    ("svc-shipping-at", "Shipping times to Austria",
     "Delivery times for orders shipped to Austria (AT). Orders placed by 12 noon ship the same working day; "
     "parcels arrive in 2-3 working days, pallets in 3-4 working days. Free shipping from EUR 250 net, otherwise "
     "EUR 9.90 per parcel. Prices on price list PL-AT-STD include Austrian packaging levies."),
    ("svc-shipping-ch", "Shipping times to Switzerland",
     "Delivery times for orders shipped to Switzerland (CH). Orders ship within 1 working day and arrive in "
     "3-5 working days including customs clearance. We act as importer: Swiss VAT and customs fees are invoiced "
     "in CHF with the goods (DDP). Dangerous goods (ADR) such as acid cleaners and flammable disinfectants cannot "
     "be shipped to Switzerland. Minimum order value CHF 200."),
    ("svc-shipping-nl", "Shipping times to the Netherlands",
     "Delivery times for orders shipped to the Netherlands (NL). Orders placed by 1 pm ship the same working day "
     "and arrive in 2-3 working days (parcels) or 3-4 working days (pallets). Free shipping from EUR 250 net, "
     "otherwise EUR 11.50 per parcel."),
    ("svc-returns", "Returns and exchanges",
     "Returns policy for business customers: unopened goods in original packaging can be returned within 30 days "
     "of delivery. Request a return number (RMA) in your account; we send a prepaid label for DE and AT. "
     "Restocking fee 10 % for returns without a fault. Chemicals, opened packs, cut-to-length threaded rods and "
     "personal protective equipment that has been unpacked cannot be returned for hygiene and safety reasons."),
    ("svc-invoices", "Invoices, payment terms and VAT",
     "Invoices are sent as PDF by e-mail on the day of shipment; e-invoices in ZUGFeRD / XRechnung format on "
     "request. Payment terms: 30 days net, 2 % discount within 10 days. Intra-community deliveries (AT, NL) are "
     "invoiced without VAT when a valid VAT ID is stored (reverse charge). Copies of invoices can be downloaded "
     "in your account under Orders."),
    ("svc-hazardous", "Shipping hazardous goods (chemicals)",
     "Shipping of dangerous goods: cleaning chemicals classified under ADR (e.g. concentrated acid cleaners, "
     "alkaline degreasers, alcohol-based disinfectants) are shipped as limited quantities by road freight only. "
     "A hazardous goods surcharge of EUR 12.50 per shipment applies. Delivery takes 1-2 extra working days. "
     "No shipping of dangerous goods to Switzerland and no express delivery. Safety data sheets are sent with "
     "the first delivery and can be downloaded from the product page."),
    ("svc-minimum-order", "Minimum order value and small-quantity surcharge",
     "Minimum order value: there is no minimum order for DE, AT and NL, but orders under EUR 50 net carry a "
     "small-quantity surcharge of EUR 7.50. For Switzerland the minimum order value is CHF 200. Fasteners are "
     "sold in full packs only; threaded rods can be cut to length from 10 pieces."),
    ("svc-express", "Express and scheduled delivery",
     "Express delivery: parcels ordered by 2 pm can be delivered next working day before 10 am or 12 noon in "
     "Germany and Austria (surcharge EUR 19.00). Scheduled deliveries and call-off orders for key accounts "
     "(price list PL-DE-KEY) by arrangement with your account manager."),
    ("svc-certificates", "Material certificates and safety data sheets",
     "Inspection certificates 3.1 to EN 10204 are available for stainless steel fasteners and fittings for "
     "EUR 15.00 per order line; order them together with the goods. Declarations of conformity for PPE and "
     "safety data sheets (SDS) for all chemicals are free of charge and can be downloaded from the product page."),
    ("svc-stock", "Stock availability and backorders",
     "Stock availability: the stock shown on the product page is updated every 15 minutes. Items not in stock "
     "are backordered and shipped as soon as they arrive, usually within 5-10 working days; partial deliveries "
     "are free of charge. You can ask for the expected date of a backorder in your account."),
    ("svc-account", "Customer account, price lists and assortments",
     "Your customer account determines the assortment you see, your price list and the countries we ship to. "
     "Key account prices (PL-DE-KEY) are agreed annually. To add products from another assortment or a delivery "
     "address in another country, contact your account manager."),
]


def main() -> None:
    rng = random.Random(SEED)
    build_fasteners(rng)
    build_fittings(rng)
    build_cleaning(rng)
    build_safety(rng)
    ent_rng = random.Random(SEED + 1)
    rows = []
    seen_parts, seen_eans = set(), set()
    for i, p in enumerate(products, start=1):
        entitle(ent_rng, p)
        md = p["metadata"]
        assert md["part_number"] not in seen_parts, md["part_number"]
        assert md["ean"] not in seen_eans, md["ean"]
        seen_parts.add(md["part_number"])
        seen_eans.add(md["ean"])
        rows.append({"doc_id": f"p{i:04d}", "title": p["title"], "text": p["text"], "metadata": md})
    assert len(rows) >= 400, len(rows)
    for doc_id, title, text in SERVICE:
        rows.append({"doc_id": doc_id, "title": title, "text": f"{title}. {text}",
                     "metadata": {"family": "service", "category": "service", "assortment": ASSORTMENTS[:],
                                  "price_list": PRICE_LISTS[:], "ship_countries": COUNTRIES[:]}})
    with OUT.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} documents ({len(products)} products, {len(SERVICE)} service pages) to {OUT}")


if __name__ == "__main__":
    main()
