"""A tiny language guess (German or English) from function words and umlauts; the offline
roles use it to answer and abstain in the turn's language."""
import re

_DE = set("der die das und ist nicht ich wir sie es ein eine einen mit für auf wie was wann wo gibt haben habe "
          "kann muss darf bei im zum zur sind wird werden oder auch noch mein meine unser uns dem den des".split())
_EN = set("the and is not i we you it a an with for on how what when where there have has can must may at in "
          "to of are will be or also my our us do does".split())


def detect_language(text: str) -> str:
    words = re.findall(r"[a-zäöüß]+", text.lower())
    de = sum(w in _DE for w in words) + 2 * len(re.findall(r"[äöüß]", text.lower()))
    en = sum(w in _EN for w in words)
    return "de" if de > en else "en"
