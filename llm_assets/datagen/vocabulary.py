"""Word lists, names, places and a small dictionary the generators fill templates with."""

from __future__ import annotations

import numpy as np


def _words(text: str) -> tuple[str, ...]:
    """Split a whitespace-separated word list."""
    return tuple(text.split())


def _items(text: str) -> tuple[str, ...]:
    """Split a ``|``-separated list written over several lines; runs of whitespace inside an
    item (a line break and indentation) become one space."""
    return tuple(" ".join(item.split()) for item in text.split("|") if item.strip())


_NOUNS = _words(
    """building bridge church castle river village town city station railway road canal harbour
    island valley mountain lake forest park museum library school university college hospital
    factory mill mine farm estate garden tower wall gate temple cathedral monastery palace fort
    regiment battalion army navy fleet ship vessel engine locomotive squadron company government
    parliament council committee party election campaign war battle siege treaty agreement law
    court trial report study survey record album single song band singer composer film novel book
    poem play episode season game player team club league match tournament championship award
    prize medal critic review audience festival concert tour exhibition collection painting
    sculpture statue design style structure plan project system network service route line
    section district county province region state territory border coast population community
    family king queen prince bishop priest officer soldier general captain commander governor
    minister president member leader founder writer artist author historian scientist plant tree
    flower bird animal insect habitat storm rainfall wind flood damage century decade period era
    year month history tradition culture language religion trade industry market economy
    production construction development expansion restoration collapse fire attack victory defeat
    retreat invasion rebellion revolution reform movement society institution organisation
    foundation version edition release recording performance role character story plot scene
    chapter theme influence success failure decline growth increase reputation career education
    marriage death funeral memorial monument site area land property house home room hall floor
    roof window door bell organ altar feature element material stone brick timber iron steel
    copper gold silver coal merchant contract budget debate journey expedition voyage colony
    settlement port cargo"""
)
_IRREGULAR_PLURALS = {"person": "people", "man": "men", "woman": "women", "child": "children"}
_ADJECTIVES = _words(
    """large small new old early late major minor important significant notable famous popular
    successful original modern ancient medieval traditional local national regional
    international public private royal military naval political religious economic cultural
    historical commercial industrial agricultural urban rural northern southern eastern western
    central coastal main principal primary secondary final strong weak heavy light long short wide
    narrow high low deep rich poor extensive considerable substantial limited brief difficult
    simple complex unusual common rare distinctive elaborate impressive remarkable positive
    negative mixed favourable critical official formal permanent temporary independent similar
    different separate additional annual seasonal tropical dense fertile severe moderate gradual
    rapid well-known so-called long-term large-scale first-class two-storey"""
)
_VERBS_PAST = _words(
    """built founded designed constructed completed opened closed destroyed damaged rebuilt
    restored expanded enlarged replaced acquired purchased sold captured defeated attacked
    defended occupied abandoned established organised published released recorded produced
    directed wrote composed performed praised criticised described discovered identified named
    renamed supported opposed elected appointed promoted dismissed signed negotiated announced
    introduced developed improved reduced increased extended connected served visited crossed
    reached entered left joined formed led won lost took began held received awarded granted
    funded commissioned launched repaired inspected surveyed studied examined documented adapted
    translated celebrated honoured dedicated"""
)
_VERBS_PARTICIPLE = _words(
    """built founded designed constructed completed opened closed destroyed damaged rebuilt
    restored expanded enlarged replaced acquired purchased sold captured defeated attacked
    defended occupied abandoned established organised published released recorded produced
    directed written composed performed praised criticised described discovered identified named
    renamed supported opposed elected appointed promoted dismissed signed negotiated announced
    introduced developed improved reduced increased extended connected served visited crossed
    reached entered joined formed led won lost taken begun held received awarded granted funded
    commissioned launched repaired inspected surveyed studied examined documented adapted
    translated celebrated honoured dedicated"""
)
_ADVERBS = _words(
    """later subsequently eventually initially originally largely mainly widely heavily briefly
    gradually rapidly significantly considerably particularly especially officially formally
    partially completely successfully"""
)
_OCCUPATIONS = _words(
    """architect engineer politician merchant painter historian journalist officer bishop composer
    novelist surveyor lawyer physician sculptor diplomat"""
)
_FIRST_NAMES = _words(
    """John William James George Charles Henry Thomas Edward Robert Richard Frederick Arthur
    Albert Walter Francis Samuel Joseph David Peter Michael Mary Elizabeth Anne Margaret Catherine
    Jane Sarah Alice Emily Charlotte Helen Louise Victoria Eleanor Grace Harriet"""
)
_SURNAMES = _words(
    """Smith Jones Taylor Brown Williams Wilson Johnson Davies Robinson Wright Thompson Evans
    Walker White Roberts Green Hall Wood Jackson Clarke Harrison Morgan Baker Hughes Edwards
    Turner Cooper Hill Ward Morris Moore Clark Lee King Harris Lewis Allen Scott Young Mitchell
    Carter Parker Campbell Stewart Murray Fraser Graham Russell Gordon Hamilton Howard Spencer
    Fitzgerald Sullivan Kennedy Murphy Weber Müller Schneider Dubois Moreau García Rossi"""
)
_PLACES = _items(
    """London|Paris|Berlin|Vienna|Rome|Madrid|Lisbon|Dublin|Edinburgh|Glasgow|Manchester|
    Liverpool|Birmingham|Bristol|York|Oxford|Cambridge|Cardiff|Belfast|Boston|Chicago|
    Philadelphia|Baltimore|Detroit|Cleveland|Pittsburgh|Toronto|Montreal|Quebec|Sydney|Melbourne|
    Adelaide|Brisbane|Auckland|Wellington|Cape Town|Bombay|Calcutta|Madras|Delhi|Shanghai|Tokyo|
    Osaka|Hong Kong|Singapore|Cairo|Alexandria|Istanbul|Athens|Naples|Venice|Florence|Milan|
    Munich|Hamburg|Cologne|Prague|Warsaw|Kraków|Budapest|Moscow|Stockholm|Copenhagen|Oslo|
    Amsterdam|Rotterdam|Antwerp|Brussels|Geneva|Zürich|Lyon|Marseille|Bordeaux|Seville|Barcelona|
    Valencia|Texas|Ohio|Michigan|Virginia|Florida|California|Kentucky|Tennessee|Maryland|
    Yorkshire|Kent|Sussex|Devon|Cornwall|Norfolk|Lancashire|Bavaria|Saxony|Normandy|Brittany|
    Provence|Tuscany|Sicily|Andalusia|Catalonia|Ontario|Queensland|Bengal|Punjab|Manitoba"""
)
_CAPITALS: dict[str, str] = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Portugal": "Lisbon",
    "Austria": "Vienna",
    "Hungary": "Budapest",
    "Poland": "Warsaw",
    "Sweden": "Stockholm",
    "Norway": "Oslo",
    "Denmark": "Copenhagen",
    "the Netherlands": "Amsterdam",
    "Belgium": "Brussels",
    "Switzerland": "Bern",
    "Greece": "Athens",
    "Ireland": "Dublin",
    "Egypt": "Cairo",
    "India": "New Delhi",
    "China": "Beijing",
    "Japan": "Tokyo",
    "Australia": "Canberra",
    "Canada": "Ottawa",
    "the United States": "Washington, D.C.",
    "Mexico": "Mexico City",
    "Brazil": "Brasília",
    "Argentina": "Buenos Aires",
    "Chile": "Santiago",
    "New Zealand": "Wellington",
    "Kenya": "Nairobi",
    "Finland": "Helsinki",
}
_COUNTRIES = (
    *_items("England|Scotland|Wales|Russia|Turkey|South Africa"),
    *_CAPITALS,
)
_ORGS = _items(
    """Royal Navy|British Army|Church of England|United States Army|Royal Air Force|
    National Trust|BBC|Football League|Royal Society|House of Commons|Ministry of Defence|
    Great Western Railway|East India Company|Metropolitan Police|Smithsonian Institution|
    Michigan State Highway Department|Joint Typhoon Warning Center|National Hurricane Center|
    Royal Academy|Admiralty|War Office|county council|city council|local government"""
)
_PUBLICATIONS = _items(
    """The Times|The Guardian|The New York Times|Rolling Stone|The Observer|AllMusic|IGN|
    GameSpot|The Daily Telegraph|Variety|The Washington Post|Billboard|The Independent"""
)
_MONTHS = _words(
    "January February March April May June July August September October November December"
)
_ORDINALS = _items("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth")
_NUMBER_WORDS = _items("two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|twenty")
_NATIONALITIES = _items(
    """an English|a Scottish|an American|a French|a German|an Irish|a Welsh|an Australian|
    a Canadian|an Italian|a Dutch|a Swedish"""
)
_BANDS = _items(
    """The Harbour Lights|Silver Orchard|The Northern Lines|Blue Meridian|The Paper Kings|
    Velvet Compass|The Low Tides|Radio Atlas|The Winter Hours|Golden Static"""
)
_STUDIOS = _items(
    """Northlight Games|Red Lantern Studios|Blue Fjord Interactive|Iron Owl|Pixel Harbour|
    Crescent Software|Tall Pine Studio|Arcadia Works"""
)

# Parallel word lists: the foreign vocabulary and the instruction generator's translations.
_DICTIONARY: dict[str, tuple[str, str, str]] = {
    "house": ("Haus", "maison", "casa"),
    "water": ("Wasser", "eau", "agua"),
    "book": ("Buch", "livre", "libro"),
    "city": ("Stadt", "ville", "ciudad"),
    "bridge": ("Brücke", "pont", "puente"),
    "church": ("Kirche", "église", "iglesia"),
    "river": ("Fluss", "rivière", "río"),
    "tree": ("Baum", "arbre", "árbol"),
    "sun": ("Sonne", "soleil", "sol"),
    "moon": ("Mond", "lune", "luna"),
    "bread": ("Brot", "pain", "pan"),
    "friend": ("Freund", "ami", "amigo"),
    "school": ("Schule", "école", "escuela"),
    "king": ("König", "roi", "rey"),
    "horse": ("Pferd", "cheval", "caballo"),
    "dog": ("Hund", "chien", "perro"),
    "cat": ("Katze", "chat", "gato"),
    "night": ("Nacht", "nuit", "noche"),
    "day": ("Tag", "jour", "día"),
    "sea": ("Meer", "mer", "mar"),
    "mountain": ("Berg", "montagne", "montaña"),
    "island": ("Insel", "île", "isla"),
    "window": ("Fenster", "fenêtre", "ventana"),
    "door": ("Tür", "porte", "puerta"),
    "table": ("Tisch", "table", "mesa"),
    "apple": ("Apfel", "pomme", "manzana"),
    "music": ("Musik", "musique", "música"),
    "war": ("Krieg", "guerre", "guerra"),
    "ship": ("Schiff", "navire", "barco"),
    "song": ("Lied", "chanson", "canción"),
    "year": ("Jahr", "année", "año"),
    "garden": ("Garten", "jardin", "jardín"),
}
LANGUAGES: tuple[str, ...] = ("en", "de", "fr", "es")
"""Languages the corpus generator can write; the first is the main one."""
DEFAULT_LANGUAGES = LANGUAGES
_LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "es": "Spanish"}


def _plural(noun: str) -> str:
    if noun in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _with_article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def _measures() -> tuple[str, ...]:
    return tuple(f"{m} metres ({round(m * 3.28084)} ft)" for m in range(4, 420, 7))


def _distances() -> tuple[str, ...]:
    return tuple(f"{mi / 10:.1f} miles ({mi / 10 * 1.609344:.1f} km)" for mi in range(13, 2400, 37))


def _big_numbers() -> tuple[str, ...]:
    rng = np.random.default_rng(20240601)
    return tuple(f"{int(v):,}" for v in np.unique(rng.lognormal(8.5, 1.3, 3000).astype(int) + 1000))


def _year_ranges() -> tuple[str, ...]:
    return tuple(
        f"between {start} and {start + span}"
        for start in range(1780, 2010, 3)
        for span in (2, 5, 11, 19)
    )
