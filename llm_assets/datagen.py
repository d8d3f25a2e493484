"""Deterministic, offline generator of realistic text data, and the shipped sample corpus.

Four kinds of rows, all streamed (never a list of the whole corpus) and reproducible from a seed:

- :func:`generate_records`: WikiText-2-like lines ``{"text", "title", "id"}``. Articles of
  encyclopedic prose (biographies, ships, storms, songs, films, games, battles, buildings,
  species, roads) built from real English words and sentence templates: a title heading, an
  introduction, sections with headings and paragraphs. By default the text is formatted like the
  raw WikiText-2 files (``" = = History = = \\n"`` headings, ``" , "`` and ``" @-@ "``); a small
  share of paragraphs is in German, French or Spanish, and a share of rows are exact or near
  duplicates of earlier rows.
- :func:`generate_reviews`: Amazon-review-like rows ``review_id, rating, title, text``.
- :func:`generate_instructions`: supervised fine-tuning rows ``instruction, input, output`` whose
  outputs are correct (arithmetic, capitals, translations, sorting, summaries of generated text).
- :func:`generate_chats`: conversations ``{"id", "messages"}`` (``{"role", "content"}`` messages,
  an optional system prompt, 1 to 3 exchanges of the same tasks, ending with the assistant).

:func:`write_corpus` writes any of them as JSONL (plain, gzip, zstd), Parquet, CSV or TXT (rows with
a ``text``: not instructions or chats), chosen by the file suffix; :func:`make_sample` regenerates
``data/sample/``, ``data/instructions/`` and ``data/chat/`` byte for byte. Command line:
``python -m llm_assets.datagen --help``.

Only the standard library, numpy, pyarrow and zstandard; no network. Sentences are filled template
by template with numpy draws over a chunk of rows, which is what makes a million rows take seconds.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import itertools
import json
import random
import re
import sys
import textwrap
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

# --- public constants -----------------------------------------------------------------------------
WIKITEXT = "wikitext"
"""Text style of the raw WikiText-2 files: `` = Title = `` headings, spaced punctuation, ``@-@``."""
PLAIN = "plain"
"""Ordinary prose: headings are the bare heading text, punctuation as written."""
STYLES: tuple[str, ...] = (WIKITEXT, PLAIN)

LANGUAGES: tuple[str, ...] = ("en", "de", "fr", "es")
"""Languages the corpus generator can write; the first is the main one."""
DEFAULT_LANGUAGES = LANGUAGES

KIND_HEADING = "heading"
KIND_PARAGRAPH = "paragraph"
KIND_DUPLICATE = "duplicate"
KIND_NEAR_DUPLICATE = "near_duplicate"
RECORD_KINDS: tuple[str, ...] = (KIND_HEADING, KIND_PARAGRAPH, KIND_DUPLICATE, KIND_NEAR_DUPLICATE)
"""Values of the ``kind`` field that ``generate_records(..., with_meta=True)`` adds."""

FORMATS: tuple[str, ...] = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet", ".csv", ".txt")
"""File suffixes :func:`write_corpus` understands (the same as the ingest reader's)."""

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
"""The repository's ``data/`` folder (where :func:`make_sample` writes by default)."""

SAMPLE_SEED = 0

_CHUNK = 2048
"""Records generated per step. Fixed (independent of ``n``) so that the first ``n`` records of a
seed never depend on how many were asked for: a smaller corpus is a prefix of a larger one."""
_RING = 2048
"""Earlier paragraphs a duplicate may copy from."""
_WRITE_CHUNK = 8192


# --- vocabulary -----------------------------------------------------------------------------------
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


_ENGLISH_SLOTS: dict[str, tuple[str, ...]] = {
    "NOUN": _NOUNS,
    "NOUNS": tuple(_plural(n) for n in _NOUNS),
    "A_NOUN": tuple(_with_article(n) for n in _NOUNS),
    "ADJ": _ADJECTIVES,
    "A_ADJ": tuple(_with_article(a) for a in _ADJECTIVES),
    "VPAST": _VERBS_PAST,
    "VPP": _VERBS_PARTICIPLE,
    "ADV": _ADVERBS,
    "OCCUPATION": _OCCUPATIONS,
    "PERSON": tuple(f"{f} {s}" for f in _FIRST_NAMES for s in _SURNAMES),
    "PLACE": _PLACES,
    "COUNTRY": _COUNTRIES,
    "ORG": _ORGS,
    "PUBLICATION": _PUBLICATIONS,
    "MONTH": _MONTHS,
    "DAY": tuple(str(d) for d in range(1, 29)),
    "YEAR": tuple(str(y) for y in range(1750, 2016)),
    "YEAR_RANGE": _year_ranges(),
    "DECADE": tuple(f"{d}s" for d in range(1780, 2011, 10)),
    "CENTURY": tuple(f"{c}th" for c in range(12, 21)),
    "ORDINAL": _ORDINALS,
    "NUMW": _NUMBER_WORDS,
    "NUMW_CAP": tuple(w.capitalize() for w in _NUMBER_WORDS),
    "INT": tuple(str(v) for v in range(3, 400, 3)),
    "BIGNUM": _big_numbers(),
    "PCT": tuple(f"{p / 10:.1f}" for p in range(15, 960, 13)),
    "MEASURE": _measures(),
    "DISTANCE": _distances(),
    "LIFESPAN": tuple(f"{b} – {b + age}" for b in range(1760, 1940, 7) for age in (41, 58, 67, 79)),
    "NATIONALITY": _NATIONALITIES,
    "BAND": _BANDS,
    "STUDIO": _STUDIOS,
}

_ENGLISH_TEMPLATES = _items(
    """{SUBJ} was {VPP} in {YEAR} by {PERSON}.|
    In {MONTH} {YEAR}, {SUBJ_L} was {VPP} near {PLACE}.|
    {SUBJ} {VPAST} {A_ADJ} {NOUN} in {PLACE} during the {CENTURY} century.|
    The {DNOUN} was {ADV} {VPP} by the {ORG} in {YEAR}.|
    According to {PERSON}, the {DNOUN} was one of the most {ADJ} {NOUNS} in {COUNTRY}.|
    By {YEAR}, more than {BIGNUM} {NOUNS} had been {VPP} in {PLACE}.|
    {NAME} received {ADJ} reviews from critics, who {VPAST} its {DNOUN} and its {DNOUN}.|
    The {DNOUN} is {MEASURE} long and was {VPP} in {YEAR}.|
    It was the {ORDINAL} {NOUN} to be {VPP} in {PLACE}, and it remained in use until {YEAR}.|
    {PERSON} later {VPAST} the {DNOUN}, which had been {VPP} {NUMW} years earlier.|
    Although the {NOUN} was {ADJ}, {SUBJ_L} was {ADV} {VPP} by the {ORG}.|
    During the {CENTURY} century, the {NOUN} of {PLACE} became {A_ADJ} {NOUN} for {ADJ} {NOUNS}.|
    The {ADJ} {DNOUN} was {VPP} on {DAY} {MONTH} {YEAR}.|
    {SUBJ} {VPAST} the {DNOUN} after {A_ADJ} {NOUN} with the {ORG}.|
    In {YEAR}, {PERSON} {VPAST} {A_NOUN} at {PLACE}; the {NOUN} was {VPP} {NUMW} years later.|
    There are {NUMW} {NOUNS} in the {DNOUN}, each of which is {ADV} {ADJ}.|
    The {NOUN} has been described as "{A_ADJ} {NOUN} of {ADJ} {NOUNS}" by {PERSON}.|
    {SUBJ} was {VPP} to {PLACE} in {MONTH} {YEAR}, where the {DNOUN} was {VPP}.|
    This {NOUN} was {ADV} {ADJ}, and the {DNOUN} {VPAST} {A_ADJ} {NOUN}.|
    As a result, the {DNOUN} was {VPP} and the {NOUN} was moved to {PLACE}.|
    {PERSON}, {A_ADJ} {OCCUPATION} from {PLACE}, {VPAST} the {DNOUN} in {YEAR}.|
    The {ORG} {VPAST} {BIGNUM} {NOUNS} {YEAR_RANGE}.|
    {SUBJ} is {ADV} regarded as {A_ADJ} example of {ADJ} {NOUN}.|
    The {DNOUN} cost £{BIGNUM}, which was paid by the {ORG}.|
    About {PCT} per cent of the {NOUNS} were {VPP} by {YEAR}.|
    Following the {NOUN} of {YEAR}, {SUBJ_L} was {VPP} by {PERSON} and {PERSON}.|
    The {NOUN} was {VPP}, but the {DNOUN} survived until the {CENTURY} century.|
    It was {VPP} {ADV} after the {NOUN} {VPAST} the {DNOUN}.|
    {NUMW_CAP} {NOUNS} were {VPP} in the {DNOUN} in {YEAR}.|
    The {DNOUN} and the {DNOUN} were {VPP} by the {ORG}, which {VPAST} {A_ADJ} {NOUN} in {PLACE}.|
    {PERSON} wrote that the {DNOUN} was "{ADV} {ADJ}".|
    Most of the {NOUNS} were {VPP} in {PLACE} and {PLACE}.|
    The {NOUN} is now {VPP} by the {ORG}.|
    In the {DECADE}, the {DNOUN} was {VPP} and {VPP}.|
    {SUBJ} {VPAST} {A_NOUN}, {A_NOUN} and {A_NOUN}.|
    The {ORDINAL} {NOUN} was {VPP} on {MONTH} {DAY}, {YEAR}, at a cost of ${BIGNUM}.|
    {SUBJ} {VPAST} {NUMW} {NOUNS} and {NUMW} {NOUNS}.|
    {SUBJ} was {VPP}.|
    The {DNOUN} was {ADV} {VPP}.|
    {SUBJ} was {VPP} by {PERSON} in {YEAR}, and after {A_ADJ} {NOUN} with the {ORG}, it was moved
    to {PLACE}, where the {DNOUN} {VPAST} {A_ADJ} {NOUN} that {VPAST} the {NOUN} for {NUMW} years.|
    {PERSON} ({LIFESPAN}) {VPAST} the {NOUN} in {YEAR}.|
    The {NOUN} was {VPP} in {PLACE}, {COUNTRY}, in {YEAR}.|
    Critics {VPAST} the {DNOUN}, and {PERSON} of {PUBLICATION} called it "{A_ADJ} {NOUN}".|
    {SUBJ} {VPAST} the {ADJ} {DNOUN} of the {ORG}.|
    However, the {DNOUN} was {VPP} in {YEAR} because of {A_ADJ} {NOUN}.|
    The {NOUNS} of the {DNOUN} were {ADV} {VPP}, and several {NOUNS} were {VPP}.|
    Between {YEAR} and the end of the {DECADE}, {SUBJ_L} {VPAST} the {DNOUN} {NUMW} times.|
    The {DNOUN} was {VPP} with {A_ADJ} {NOUN} of {NUMW} {NOUNS}, {A_ADJ} {NOUN} and {A_NOUN}.|
    In an interview with {PUBLICATION}, {PERSON} said that the {DNOUN} was "{ADJ} but {ADJ}".|
    {SUBJ} {VPAST} the {DNOUN} in {PLACE}, {ADV} {VPP} by the {NOUN} of {YEAR}.|
    {SUBJ} was {VPP} in {YEAR} by {PERSON}, {A_ADJ} {OCCUPATION} from {PLACE}, who had {VPP} the
    {DNOUN} of the {ORG} {NUMW} years earlier.|
    After the {NOUN} of {YEAR}, the {ORG} {VPAST} {A_ADJ} {NOUN} near {PLACE}, and by the end of the
    {DECADE} more than {BIGNUM} {NOUNS} had been {VPP} there.|
    The {DNOUN}, which was {VPP} by {PERSON} in {YEAR}, is {MEASURE} long and was {ADV} {VPP}
    during the {CENTURY} century.|
    In {MONTH} {YEAR}, {PERSON} and {PERSON} {VPAST} the {DNOUN}, although the {ORG} had {VPP} the
    {NOUN} and {VPP} its {NOUNS}.|
    Although {PERSON} {VPAST} that the {DNOUN} was "{ADV} {ADJ}", {PUBLICATION} described the {NOUN}
    as {A_ADJ} {NOUN} of {ADJ} {NOUNS}.|
    The {ADJ} {NOUNS} of {PLACE} were {VPP} {YEAR_RANGE}, when the {ORG} {VPAST} the {DNOUN} and
    {VPAST} {A_ADJ} {NOUN} in {COUNTRY}.|
    {SUBJ} {VPAST} {A_ADJ} {NOUN} in {PLACE} on {DAY} {MONTH} {YEAR}, {ADV} after the {DNOUN} had
    been {VPP} by {A_ADJ} {NOUN}.|
    According to {PUBLICATION}, the {DNOUN} was {VPP} at a cost of £{BIGNUM}, of which about {PCT}
    per cent was paid by the {ORG}.|
    During the {DECADE}, {SUBJ_L} {VPAST} the {DNOUN}, the {DNOUN} and the {DNOUN}, and {PERSON}
    {VPAST} {A_NOUN} that {VPAST} {NUMW} {NOUNS}.|
    It is one of the {NUMW} {ADJ} {NOUNS} in {PLACE} that were {VPP} in the {CENTURY} century, and
    the only one to have been {VPP} by the {ORG}.|
    When {PERSON} {VPAST} the {DNOUN} in {YEAR}, the {NOUNS} of {PLACE} and {PLACE} were {ADV}
    {VPP}, and the {ORG} {VPAST} {A_ADJ} {NOUN} to {VPP} them.|
    Contemporary accounts in {PUBLICATION} {VPAST} the {DNOUN} and its {ADJ} {NOUNS}, but modern
    historians such as {PERSON} have {VPP} this view."""
)

_DOMAIN_INTROS = {
    "person": "{NAME} ({LIFESPAN}) was {NATIONALITY} {OCCUPATION} who {VPAST} {A_ADJ} {NOUN} in "
    "{PLACE}.",
    "ship": "{NAME} was {A_ADJ} {SHIP_TYPE} built for the {NAVY} in the {DECADE}.",
    "storm": "{NAME} was {A_ADJ} tropical cyclone that {VPAST} {PLACE} in {MONTH} {YEAR}.",
    "music": '"{NAME}" is a song by {BAND}, released in {YEAR} as the {ORDINAL} single from their '
    "{ORDINAL} album.",
    "film": "{NAME} is a {YEAR} {FILM_GENRE} film directed by {PERSON} and starring {PERSON} and "
    "{PERSON}.",
    "game": "{NAME} is {A_GAME_GENRE} video game developed by {STUDIO} and published in {YEAR} for "
    "the {CONSOLE}.",
    "battle": "The {NAME} was fought on {DAY} {MONTH} {YEAR} between the forces of {COUNTRY} and "
    "{COUNTRY}.",
    "building": "{NAME} is {A_BUILDING_TYPE} in {PLACE}, {COUNTRY}.",
    "species": "{NAME} is a species of {TAXON} in the family {FAMILY}.",
    "road": "{NAME} is a state trunkline highway in the U.S. state of {US_STATE} that runs for "
    "{DISTANCE}.",
}
_INTRO_SLOTS: dict[str, tuple[str, ...]] = {
    "SHIP_TYPE": _items("battleship|cruiser|destroyer|frigate|ocean liner|sloop|submarine"),
    "NAVY": _items("Royal Navy|United States Navy|Imperial German Navy|French Navy|Italian Navy"),
    "FILM_GENRE": _items("drama|comedy|thriller|western|horror|science fiction|musical|war"),
    "A_GAME_GENRE": _items(
        "a role-playing|an action-adventure|a platform|a tactical|a racing|a puzzle|a strategy"
    ),
    "CONSOLE": _items("PlayStation Portable|Nintendo DS|Xbox 360|PlayStation 3|Wii|Game Boy"),
    "A_BUILDING_TYPE": _items(
        """a church|a country house|a castle|a cathedral|a museum|a town hall|a railway station|
        a lighthouse|a Grade II listed building"""
    ),
    "TAXON": _items("fungus|bird|moth|beetle|flowering plant|frog|snail|fish"),
    "FAMILY": _items(
        "Amanitaceae|Corvidae|Fagaceae|Salicaceae|Ranidae|Noctuidae|Carabidae|Helicidae|Conidae"
    ),
    "US_STATE": _items("Michigan|Ohio|Washington|California|New York|Texas|Indiana|Maryland"),
}


@dataclass(frozen=True)
class _Domain:
    """One kind of article: how its titles look, what it is called, its nouns and sections."""

    name: str
    subjects: tuple[str, ...]
    nouns: tuple[str, ...]
    sections: tuple[str, ...]


_DOMAINS: tuple[_Domain, ...] = (
    _Domain(
        "person",
        _items("He|He|He|She|The young man|The author"),
        _items(
            """career|father|mother|wife|son|daughter|education|appointment|retirement|estate|
            correspondence|friendship|reputation|portrait"""
        ),
        _items(
            """Early life|Education|Career|Political career|Military service|Personal life|
            Later life|Death|Legacy|Honours"""
        ),
    ),
    _Domain(
        "ship",
        _items("The ship|She|The vessel|The cruiser"),
        _items(
            "hull|deck|turret|boiler|armour|crew|propeller|torpedo|gun|mast|dockyard|convoy|refit"
        ),
        _items(
            """Design and description|Armament|Propulsion|Construction and career|Service history|
            World War I|World War II|Fate"""
        ),
    ),
    _Domain(
        "storm",
        _items("The storm|The hurricane|The cyclone|The system|The depression"),
        _items(
            """rainfall|wind|landfall|storm surge|flooding|pressure|eye|convection|warning|
            evacuation|damage|coastline"""
        ),
        _items("Meteorological history|Preparations|Impact|Aftermath|Retirement"),
    ),
    _Domain(
        "music",
        _items("The song|The single|The track|It"),
        _items(
            """chorus|lyrics|melody|guitar|vocals|producer|music video|chart|bridge|recording|
            tempo|verse"""
        ),
        _items(
            """Background|Recording|Composition|Release|Critical reception|Chart performance|
            Music video|Live performances|Track listing|Personnel"""
        ),
    ),
    _Domain(
        "film",
        _items("The film|It|The picture"),
        _items(
            """screenplay|cast|cinematography|soundtrack|box office|premiere|director|scene|
            script|sequel|budget"""
        ),
        _items("Plot|Cast|Production|Filming|Release|Reception|Box office|Legacy"),
    ),
    _Domain(
        "game",
        _items("The game|It"),
        _items(
            """gameplay|level|character|console|developer|publisher|soundtrack|multiplayer mode|
            sequel|engine|battle system"""
        ),
        _items("Gameplay|Plot|Development|Music|Release|Reception|Legacy"),
    ),
    _Domain(
        "battle",
        _items("The battle|The attack|The campaign|The engagement"),
        _items(
            """infantry|cavalry|artillery|casualties|trenches|flank|garrison|reinforcements|
            supply line|ceasefire|prisoners|offensive"""
        ),
        _items("Background|Prelude|Opposing forces|Battle|Aftermath|Casualties|Legacy"),
    ),
    _Domain(
        "building",
        _items("The building|The church|The structure|The castle|It"),
        _items(
            """nave|tower|spire|chancel|facade|roof|window|courtyard|garden|architect|
            foundation stone|restoration"""
        ),
        _items("History|Architecture|Interior|Exterior|Restoration|Present day"),
    ),
    _Domain(
        "species",
        _items("The species|It|This species|The organism"),
        _items(
            """habitat|cap|stem|wing|plumage|diet|range|population|breeding season|predators|
            spores|leaves"""
        ),
        _items(
            """Taxonomy|Description|Distribution and habitat|Ecology|Behaviour|Conservation|
            Toxicity"""
        ),
    ),
    _Domain(
        "road",
        _items("The highway|The road|The route|The freeway|It"),
        _items(
            """interchange|junction|lane|bridge|traffic|pavement|bypass|intersection|median|
            right-of-way|overpass|county line"""
        ),
        _items("Route description|History|Major intersections|Future|Traffic"),
    ),
)
_SUBSECTIONS = _items(
    """Early years|Later years|Reception|Construction|Operations|Modern era|Commercial performance|
    Critical response|First phase|Second phase|Description|Changes|Notes"""
)
_SHIP_NAMES = _items(
    """Valiant|Dreadnought|Indomitable|Resolution|Orion|Ajax|Bellerophon|Vanguard|Audacious|
    Formidable|Renown|Repulse|Endeavour|Intrepid|Triumph|Warspite|Nassau|Seydlitz|Emden"""
)
_SONG_WORDS = _items(
    """Love|Heart|Night|Summer|Fire|Rain|Dream|Home|Road|Light|Blue|Golden|Wild|Lonely|Electric|
    Broken|Midnight|River|Sky|Paradise|Story|Girl|Ocean|Silver"""
)
_GAME_WORDS = _items("Chronicles|Legends|Tales|Quest|Saga|Kingdom|Shadow|Dragon|Star|Crystal")
_GENERA = _items(
    "Amanita|Corvus|Quercus|Salix|Rana|Cortinarius|Lactarius|Boletus|Aquila|Falco|Helix|Conus"
)
_EPITHETS = _items(
    """alba|nigra|rubra|major|minor|vulgaris|montana|borealis|orientalis|australis|sylvatica|
    maritima|gigantea|elegans|muscaria"""
)


def _article_title(domain: str, rnd: random.Random) -> tuple[str, str]:
    """(title, name): the heading of a new article and how its prose refers to it."""
    choice, place, year = rnd.choice, rnd.choice(_PLACES), rnd.randint(1850, 2012)
    if domain == "person":
        title = f"{choice(_FIRST_NAMES)} {choice(_SURNAMES)}"
        return title, title
    if domain == "ship":
        prefix = choice(("HMS", "HMS", "USS", "SMS"))
        title = f"{prefix} {choice(_SHIP_NAMES) if prefix != 'USS' else place}"
        return title, title
    if domain == "storm":
        name = f"{choice(('Hurricane', 'Tropical Storm', 'Typhoon'))} {choice(_FIRST_NAMES)}"
        return f"{name} ({year})", name
    if domain == "music":
        name = f"{choice(_SONG_WORDS)} {choice(_SONG_WORDS)}"
        return f"{name} ({choice(('song', 'song', 'album'))})", name
    if domain == "film":
        name = f"The {choice(_ADJECTIVES[:40]).capitalize()} {choice(_NOUNS).capitalize()}"
        return f"{name} ({year} film)", name
    if domain == "game":
        name = f"{choice(_SONG_WORDS)} {choice(_GAME_WORDS)}{choice(('', ' II', ' III', ' IV'))}"
        return name, name
    if domain == "battle":
        title = f"{choice(('Battle', 'Battle', 'Siege'))} of {place}"
        return title, title
    if domain == "building":
        title = choice(
            (
                f"{place} Cathedral",
                f"{place} Castle",
                f"{choice(_SURNAMES)} Hall",
                f"St {choice(_FIRST_NAMES)}'s Church, {place}",
            )
        )
        return title, title
    if domain == "species":
        title = f"{choice(_GENERA)} {choice(_EPITHETS)}"
        return title, title
    number = rnd.randint(1, 200)
    if rnd.random() < 0.5:
        return f"M-{number} (Michigan highway)", f"M-{number}"
    return f"State Route {number} ({choice(_INTRO_SLOTS['US_STATE'])})", f"State Route {number}"


# --- other languages ------------------------------------------------------------------------------
_FOREIGN_SLOTS: dict[str, dict[str, tuple[str, ...]]] = {
    # German: only feminine and neuter nouns, whose nominative and accusative articles agree.
    "de": {
        "NOUN": _items(
            """die Stadt|das Dorf|die Kirche|das Schloss|die Brücke|das Museum|die Burg|die Schule|
            das Rathaus|die Universität|die Bibliothek|das Theater|die Festung|die Mühle|
            die Straße|die Bahnstrecke|das Kloster|die Kapelle|das Gebäude|die Regierung|
            die Armee|die Gemeinde|die Region|das Gebiet|die Insel|das Tal|die Sammlung|
            das Album|die Band|das Lied|die Zeitung|die Partei|die Schlacht|das Schiff|die Firma|
            das Unternehmen|die Ausstellung|die Bevölkerung|das Werk"""
        ),
        "ADJ": _words(
            """bekannt berühmt wichtig groß klein alt neu modern historisch beliebt bedeutend
            umstritten erfolgreich schön typisch selten einzigartig politisch"""
        ),
        "VPP": _words(
            """gebaut gegründet zerstört erweitert renoviert eröffnet geschlossen verkauft
            beschrieben veröffentlicht errichtet gestaltet gekauft übernommen restauriert benannt
            entdeckt angegriffen verlegt gefeiert"""
        ),
        "VPAST": _words(
            """baute gründete zerstörte erweiterte kaufte verkaufte beschrieb veröffentlichte
            leitete besuchte eroberte entdeckte gewann verlor übernahm"""
        ),
        "ADV": _items("sehr|besonders|ziemlich|vor allem|bis heute|weithin"),
        "NUMW": _items("zwei|drei|vier|fünf|sechs|sieben|acht|zehn|zwölf"),
    },
    # French and Spanish: verbs in tenses that do not agree with their object, invariable
    # adjectives, and no article after "de"/"à" (which would need du/au/del/al).
    "fr": {
        "NOUN": _items(
            """la ville|le village|l'église|le château|le pont|le musée|la cathédrale|l'école|
            la bibliothèque|le théâtre|la forteresse|le moulin|la rue|la gare|le monastère|
            la chapelle|le bâtiment|le gouvernement|l'armée|la commune|la région|l'île|la vallée|
            la collection|l'album|le groupe|la chanson|le journal|le parti|la bataille|le navire|
            l'entreprise|l'exposition|la population|l'œuvre"""
        ),
        "ADJ": _words(
            """célèbre moderne historique populaire remarquable rare unique politique magnifique
            riche pittoresque emblématique typique considérable"""
        ),
        "VPAST": _items(
            """a construit|a fondé|a détruit|a agrandi|a acheté|a vendu|a décrit|a publié|a dirigé|
            a visité|a restauré|a découvert|a rénové|a conçu|a ouvert|a modernisé"""
        ),
        "ADV": _items("très|particulièrement|assez|toujours|encore|vraiment"),
        "NUMW": _items("deux|trois|quatre|cinq|six|sept|huit|dix|douze"),
    },
    "es": {
        "NOUN": _items(
            """la ciudad|el pueblo|la iglesia|el castillo|el puente|el museo|la catedral|
            la escuela|la biblioteca|el teatro|la fortaleza|el molino|la calle|la estación|
            el monasterio|la capilla|el edificio|el gobierno|el ejército|el municipio|la región|
            la isla|el valle|la colección|el álbum|el grupo|la canción|el periódico|el partido|
            la batalla|el barco|la empresa|la exposición|la población|la obra"""
        ),
        "ADJ": _words(
            """importante popular notable célebre enorme excelente interesante principal
            impresionante relevante singular fundamental original regional cultural"""
        ),
        "VPAST": _items(
            """construyó|fundó|destruyó|amplió|compró|vendió|describió|publicó|dirigió|visitó|
            restauró|descubrió|diseñó|inauguró|renovó|modernizó"""
        ),
        "ADV": _items("muy|especialmente|bastante|todavía|realmente|sin duda"),
        "NUMW": _items("dos|tres|cuatro|cinco|seis|siete|ocho|diez|doce"),
    },
}
_FOREIGN_TEMPLATES: dict[str, tuple[str, ...]] = {
    "de": _items(
        """{de.NP} wurde im Jahr {YEAR} von {PERSON} {de.VPP}.|
        Im Jahr {YEAR} {de.VPAST} {PERSON} {de.NOUN} in der Nähe von {PLACE}.|
        {de.NP} ist heute {de.ADV} {de.ADJ} und gehört zu den ältesten Bauwerken der Region.|
        Nach dem Krieg wurde {de.NOUN} {de.VPP} und später an {PERSON} verkauft.|
        Die Stadt {PLACE} hatte im Jahr {YEAR} etwa {BIGNUM} Einwohner.|
        Laut {PERSON} war {de.NOUN} damals sehr {de.ADJ}.|
        Zwischen {de.YEARS} wurde {de.NOUN} mehrmals {de.VPP}.|
        {de.NP} liegt in der Nähe von {PLACE} und ist {de.ADV} {de.ADJ}.|
        Seit {YEAR} ist {de.NOUN} für Besucher geöffnet.|
        Es gibt {de.NUMW} bekannte Beispiele dieser Art in {PLACE}.|
        Im Jahr {YEAR} {de.VPAST} {PERSON} {de.NOUN}, die bis heute {de.ADJ} ist.|
        Die Geschichte von {PLACE} ist eng mit {PERSON} verbunden, der dort {de.NUMW} Jahre
        lebte."""
    ),
    "fr": _items(
        """En {YEAR}, {PERSON} {fr.VPAST} {fr.NOUN} près de {PLACE}.|
        {fr.NP} est {fr.ADV} {fr.ADJ} et attire de nombreux visiteurs chaque année.|
        Selon {PERSON}, {fr.NOUN} était très {fr.ADJ} à cette époque.|
        La ville de {PLACE} comptait environ {BIGNUM} habitants en {YEAR}.|
        Entre {fr.YEARS}, {PERSON} {fr.VPAST} {fr.NOUN} à plusieurs reprises.|
        {fr.NP} se trouve au centre de {PLACE} et reste {fr.ADV} {fr.ADJ}.|
        Après la guerre, {PERSON} {fr.VPAST} {fr.NOUN} avec le soutien de {PERSON}.|
        Aujourd'hui, {fr.NOUN} reste un lieu {fr.ADJ} de la région.|
        Il existe {fr.NUMW} exemples connus de ce type à {PLACE}.|
        Depuis {YEAR}, {fr.NOUN} est un symbole {fr.ADJ} pour les habitants de {PLACE}.|
        Au cours du siècle suivant, {PERSON} {fr.VPAST} {fr.NOUN}, qui est {fr.ADV} {fr.ADJ}."""
    ),
    "es": _items(
        """En {YEAR}, {PERSON} {es.VPAST} {es.NOUN} cerca de {PLACE}.|
        {es.NP} es {es.ADV} {es.ADJ} y recibe muchos visitantes cada año.|
        Según {PERSON}, {es.NOUN} era muy {es.ADJ} en aquella época.|
        La ciudad de {PLACE} tenía unos {BIGNUM} habitantes en {YEAR}.|
        Entre {es.YEARS}, {PERSON} {es.VPAST} {es.NOUN} varias veces.|
        {es.NP} se encuentra en el centro de {PLACE} y sigue siendo {es.ADV} {es.ADJ}.|
        Después de la guerra, {PERSON} {es.VPAST} {es.NOUN} con el apoyo de {PERSON}.|
        Hoy en día, {es.NOUN} sigue siendo un lugar {es.ADJ} de la región.|
        Existen {es.NUMW} ejemplos conocidos de este tipo en {PLACE}.|
        Desde {YEAR}, {es.NOUN} es un símbolo {es.ADJ} para los habitantes de {PLACE}.|
        Durante el siglo siguiente, {PERSON} {es.VPAST} {es.NOUN}, que es {es.ADV} {es.ADJ}."""
    ),
}
for _code, _and in (("de", "und"), ("fr", "et"), ("es", "y")):
    # sentence-initial noun phrases, and ordered year pairs ("1845 und 1862")
    _FOREIGN_SLOTS[_code]["NP"] = tuple(n[0].upper() + n[1:] for n in _FOREIGN_SLOTS[_code]["NOUN"])
    _FOREIGN_SLOTS[_code]["YEARS"] = tuple(
        r.removeprefix("between ").replace(" and ", f" {_and} ") for r in _year_ranges()
    )

_EDIT_WORDS = _NOUNS + _ADJECTIVES[:60]
"""Replacement words of near-duplicate edits."""


# --- WikiText formatting -------------------------------------------------------------------------
_WIKI_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<=\w)-(?=\w)"), " \x01 "),  # hyphen inside a word
    (re.compile(r"(?<=\d),(?=\d)"), " \x02 "),  # thousands separator
    (re.compile(r"(?<=\d)\.(?=\d)"), " \x03 "),  # decimal point
    (re.compile(r'([,;:()"$£])'), r" \1 "),
    (re.compile(r"(?<!\b[A-Z])\.(?=\s|$)"), " ."),  # full stop, not an initial like "U.S."
    (re.compile(r"'s\b"), " 's"),
)
_WIKI_MARKERS = str.maketrans({"\x01": "@-@", "\x02": "@,@", "\x03": "@.@"})


def to_wikitext(text: str) -> str:
    """Format ``text`` the way the raw WikiText files are tokenized: punctuation set off by
    spaces, ``@-@``/``@,@``/``@.@`` inside words and numbers, single spaces. Template
    placeholders (``{SLOT}``) pass through unchanged."""
    for pattern, replacement in _WIKI_RULES:
        text = pattern.sub(replacement, text)
    return " ".join(text.split()).translate(_WIKI_MARKERS)


# --- the template engine --------------------------------------------------------------------------
_SLOT = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
_DOMAIN_SLOTS = ("SUBJ", "SUBJ_L", "DNOUN")
_ZIPF_SLOTS = frozenset({"NOUN", "NOUNS", "A_NOUN", "ADJ", "A_ADJ", "VPAST", "VPP"})
"""Slots whose words are drawn with Zipf-like frequencies (list order = rank) as in real text."""


@dataclass(frozen=True)
class _Template:
    fmt: str
    """The sentence with ``%s`` where the slots go."""
    slots: tuple[str, ...]


@dataclass(frozen=True)
class _Slot:
    values: np.ndarray
    cumulative: np.ndarray | None
    """Cumulative probabilities ending at 1.0; None for a uniform draw."""


class _Grammar:
    """Every template and word list of one text style, compiled once per process."""

    def __init__(self, style: str) -> None:
        self.style = style
        fmt = to_wikitext if style == WIKITEXT else _identity
        self.slots: dict[str, _Slot] = {}
        for name, values in (*_ENGLISH_SLOTS.items(), *_INTRO_SLOTS.items()):
            self.slots[name] = _slot([fmt(v) for v in values], zipf=name in _ZIPF_SLOTS)
        for code, slots in _FOREIGN_SLOTS.items():
            for name, values in slots.items():
                self.slots[f"{code}.{name}"] = _slot([fmt(v) for v in values], zipf=False)
        # Domain-specific slots: one row per domain, padded; only the first counts[d] are drawn.
        tables = {
            "SUBJ": [d.subjects for d in _DOMAINS],
            "SUBJ_L": [tuple(_lower_first(s) for s in d.subjects) for d in _DOMAINS],
            "DNOUN": [d.nouns for d in _DOMAINS],
        }
        self.domain_slots: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name, rows in tables.items():
            width = max(len(row) for row in rows)
            table = np.full((len(rows), width), "", dtype=object)
            for d, row in enumerate(rows):
                table[d, : len(row)] = [fmt(v) for v in row]
            self.domain_slots[name] = (table, np.array([len(row) for row in rows]))
        self.templates: list[_Template] = []
        self.language_templates: dict[str, tuple[int, int]] = {}
        for code, templates in (("en", _ENGLISH_TEMPLATES), *_FOREIGN_TEMPLATES.items()):
            self.language_templates[code] = self._add(templates)
        self.intro_templates = np.array(
            [self._add((_DOMAIN_INTROS[d.name],))[0] for d in _DOMAINS], dtype=np.int64
        )

    def _add(self, templates: Sequence[str]) -> tuple[int, int]:
        start = len(self.templates)
        for template in templates:
            text = to_wikitext(template) if self.style == WIKITEXT else template
            parts = _SLOT.split(text)
            fmt = "%s".join(part.replace("%", "%%") for part in parts[0::2])
            self.templates.append(_Template(fmt, tuple(parts[1::2])))
        return start, len(templates)

    def draw(self, name: str, rng: np.random.Generator, domains: np.ndarray) -> np.ndarray:
        """Words for slot ``name`` of ``len(domains)`` sentences (``domains``: each one's)."""
        m = len(domains)
        slot = self.slots.get(name)
        if slot is not None:
            if slot.cumulative is None:
                return slot.values[rng.integers(0, len(slot.values), m)]
            return slot.values[np.searchsorted(slot.cumulative, rng.random(m), side="right")]
        table, counts = self.domain_slots[name]
        return table[domains, (rng.random(m) * counts[domains]).astype(np.int64)]

    def sentences(
        self,
        template_ids: np.ndarray,
        domains: np.ndarray,
        names: np.ndarray,
        rng: np.random.Generator,
    ) -> list[str]:
        """Fill one template per sentence, all sentences of a template at once."""
        out: list[str] = [""] * len(template_ids)
        order = np.argsort(template_ids, kind="stable")
        ordered = template_ids[order]
        cuts = np.flatnonzero(np.diff(ordered)) + 1
        for start, end in zip(
            np.r_[0, cuts].tolist(), np.r_[cuts, len(ordered)].tolist(), strict=True
        ):
            positions = order[start:end]
            template = self.templates[int(ordered[start])]
            group_domains = domains[positions]
            columns = [
                (names[positions] if slot == "NAME" else self.draw(slot, rng, group_domains))
                for slot in template.slots
            ]
            fmt = template.fmt
            if columns:
                filled = [fmt % row for row in zip(*(c.tolist() for c in columns), strict=True)]
            else:
                filled = [fmt] * (end - start)
            for position, sentence in zip(positions.tolist(), filled, strict=True):
                out[position] = sentence
        return out


def _identity(text: str) -> str:
    return text


def _lower_first(text: str) -> str:
    return text[0].lower() + text[1:]


def _slot(values: list[str], zipf: bool) -> _Slot:
    array = np.array(values, dtype=object)
    if not zipf:
        return _Slot(array, None)
    weights = 1.0 / np.arange(1, len(values) + 1) ** 0.8
    cumulative = np.cumsum(weights) / weights.sum()
    cumulative[-1] = 1.0
    return _Slot(array, cumulative)


@cache
def _grammar(style: str) -> _Grammar:
    return _Grammar(style)


# --- corpus records -------------------------------------------------------------------------------
_SENTENCES_MU = 1.63
_SENTENCES_SIGMA = 0.62
_MAX_SENTENCES = 32
"""Paragraph length in sentences: log-normal (median ~3.7), capped: WikiText-2's long tail."""


@dataclass
class _Article:
    title: str
    name: str
    domain: int
    plan: deque[tuple[int, str]]
    """What comes next: (heading level, heading) or (0, "intro") / (0, "") for a paragraph."""


def _new_article(rnd: random.Random) -> _Article:
    domain_index = rnd.randrange(len(_DOMAINS))
    domain = _DOMAINS[domain_index]
    title, name = _article_title(domain.name, rnd)
    plan: deque[tuple[int, str]] = deque([(1, title), (0, "intro")])
    plan.extend((0, "") for _ in range(rnd.randint(0, 2)))
    n_sections = rnd.randint(2, min(6, len(domain.sections)))
    for index in sorted(rnd.sample(range(len(domain.sections)), n_sections)):
        plan.append((2, domain.sections[index]))
        if rnd.random() < 0.15:
            for sub in rnd.sample(_SUBSECTIONS, rnd.randint(1, 2)):
                plan.append((3, sub))
                plan.extend((0, "") for _ in range(rnd.randint(1, 4)))
        else:
            plan.extend((0, "") for _ in range(rnd.randint(1, 8)))
    return _Article(title, name, domain_index, plan)


def generate_records(
    n: int,
    seed: int = 0,
    *,
    languages: Sequence[str] = DEFAULT_LANGUAGES,
    foreign_fraction: float = 0.05,
    duplicate_fraction: float = 0.02,
    near_duplicate_share: float = 0.5,
    style: str = WIKITEXT,
    with_meta: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield ``n`` WikiText-2-like records ``{"text", "title", "id"}``, deterministically.

    Records are the lines of generated encyclopedia articles: a title heading, an introduction,
    sections with headings (``kind`` ``heading``, under 10 GPT-2 tokens) and paragraphs of one to
    ~30 sentences (mean ~440 characters over all records, a long tail to a few thousand).

    Args:
        n: number of records.
        seed: the same seed gives the same records; the first ``k`` records of ``n > k`` are the
            records of ``n = k``.
        languages: languages to write (:data:`LANGUAGES`). With ``"en"`` and others, a share
            ``foreign_fraction`` of the paragraphs is in one of the others; without ``"en"``
            every paragraph is in one of the given languages. Headings are always English.
        foreign_fraction: share of paragraphs in a language other than English.
        duplicate_fraction: share of records that copy an earlier paragraph (from the last
            2048): ``near_duplicate_share`` of them with a few words replaced, the rest exact.
            Below 1: a copy needs an original before it.
        near_duplicate_share: share of the duplicates that are near (edited) copies.
        style: :data:`WIKITEXT` (the raw WikiText-2 formatting) or :data:`PLAIN`.
        with_meta: also yield ``lang`` and ``kind`` (one of :data:`RECORD_KINDS`).
    """
    _check_fraction("foreign_fraction", foreign_fraction)
    _check_fraction("duplicate_fraction", duplicate_fraction)
    if duplicate_fraction == 1.0:
        raise ValueError(
            "duplicate_fraction must be below 1: every record would copy an earlier paragraph, "
            "and the first has none to copy"
        )
    _check_fraction("near_duplicate_share", near_duplicate_share)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    unknown = [code for code in languages if code not in LANGUAGES]
    if unknown or not languages:
        raise ValueError(f"languages must be a non-empty subset of {LANGUAGES}, got {languages}")
    foreign = tuple(code for code in dict.fromkeys(languages) if code != "en")
    if "en" not in languages:
        foreign_fraction = 1.0
    elif not foreign:
        foreign_fraction = 0.0
    return _records(
        n,
        seed,
        foreign,
        foreign_fraction,
        duplicate_fraction,
        near_duplicate_share,
        style,
        with_meta,
    )


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, got {value}")


def _records(
    n: int,
    seed: int,
    foreign: tuple[str, ...],
    foreign_fraction: float,
    duplicate_fraction: float,
    near_duplicate_share: float,
    style: str,
    with_meta: bool,
) -> Iterator[dict[str, Any]]:
    grammar = _grammar(style)
    wiki = style == WIKITEXT
    # headings and article names recur: format each once
    fmt = lru_cache(maxsize=4096)(to_wikitext) if wiki else _identity
    languages = ("en", *foreign)
    starts = np.array([grammar.language_templates[code][0] for code in languages])
    counts = np.array([grammar.language_templates[code][1] for code in languages])
    ring: deque[tuple[str, str, str]] = deque(maxlen=_RING)  # (text, title, lang)
    article: _Article | None = None
    done = 0
    chunk_index = 0
    while done < n:
        rng = np.random.default_rng([seed, chunk_index])
        rnd = _python_random(rng)
        draws = rng.random((_CHUNK, 4)).tolist()
        n_sentences = np.clip(
            np.rint(rng.lognormal(_SENTENCES_MU, _SENTENCES_SIGMA, _CHUNK)), 1, _MAX_SENTENCES
        ).astype(np.int64)

        # Pass 1: what each record is: (kind, heading level or language index, article, heading,
        # whether the paragraph opens its article).
        plan: list[tuple[str, int, _Article | None, str, bool]] = []
        for dup_draw, near_draw, foreign_draw, language_draw in draws:
            if dup_draw < duplicate_fraction:
                near = near_draw < near_duplicate_share
                plan.append((KIND_NEAR_DUPLICATE if near else KIND_DUPLICATE, 0, None, "", False))
                continue
            if article is None or not article.plan:
                article = _new_article(rnd)
            level, what = article.plan.popleft()
            if level:
                plan.append((KIND_HEADING, level, article, what, False))
                continue
            language = 0
            if foreign and foreign_draw < foreign_fraction:
                language = 1 + int(language_draw * len(foreign))
            plan.append((KIND_PARAGRAPH, language, article, "", what == "intro"))

        # Pass 2: every paragraph's sentences, template by template.
        paragraphs = [item for item in plan if item[0] == KIND_PARAGRAPH]
        lengths = n_sentences[[i for i, item in enumerate(plan) if item[0] == KIND_PARAGRAPH]]
        para_language = np.array([item[1] for item in paragraphs], dtype=np.int64)
        para_domain = np.array([item[2].domain for item in paragraphs], dtype=np.int64)
        para_name = np.array([fmt(item[2].name) for item in paragraphs], dtype=object)
        para_intro = np.array([item[4] for item in paragraphs], dtype=bool) & (para_language == 0)
        owner = np.repeat(np.arange(len(paragraphs)), lengths)
        sentence_language = para_language[owner]
        template_ids = starts[sentence_language] + (
            rng.random(len(owner)) * counts[sentence_language]
        ).astype(np.int64)
        offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
        template_ids[offsets[:-1][para_intro]] = grammar.intro_templates[para_domain[para_intro]]
        sentences = grammar.sentences(template_ids, para_domain[owner], para_name[owner], rng)
        bounds = offsets.tolist()

        # Pass 3: assemble in order; duplicates copy from the paragraphs that came before.
        paragraph_number = 0
        for (kind, detail, source, heading, _intro), draw in zip(plan, draws, strict=True):
            if done == n:
                break
            if kind == KIND_HEADING:
                text = _heading(fmt(heading), detail) if wiki else heading
                title, lang = source.title, "en"
            elif kind == KIND_PARAGRAPH:
                start, end = bounds[paragraph_number], bounds[paragraph_number + 1]
                body = " ".join(sentences[start:end])
                paragraph_number += 1
                text = f" {body} \n" if wiki else body
                title, lang = source.title, languages[detail]
                ring.append((text, title, lang))
            elif ring:
                text, title, lang = ring[int(draw[2] * len(ring))]
                if kind == KIND_NEAR_DUPLICATE:
                    text = _edit_words(text, rnd)
            else:
                continue  # nothing to copy yet: no record
            record: dict[str, Any] = {"text": text, "title": title, "id": f"wiki-{seed}-{done:08d}"}
            if with_meta:
                record["lang"] = lang
                record["kind"] = kind
            yield record
            done += 1
        chunk_index += 1


def _heading(text: str, level: int) -> str:
    """A WikiText heading line: level 1 `` = Title = \\n``, level 2 `` = = Section = = \\n``."""
    marks = " ".join("=" * level)
    return f" {marks} {text} {marks} \n"


def _python_random(rng: np.random.Generator) -> random.Random:
    """A stdlib generator seeded from ``rng``, for the per-article and per-edit choices."""
    return random.Random(int(rng.integers(0, 2**63)))


def _edit_words(text: str, rnd: random.Random) -> str:
    """A near duplicate of ``text``: about one word in fifty (at least one) replaced."""
    words = text.split(" ")
    candidates = [i for i, word in enumerate(words) if len(word) > 3 and word.isalpha()]
    if not candidates:
        words.insert(min(1, len(words)), rnd.choice(_EDIT_WORDS))
        return " ".join(words)
    for index in rnd.sample(candidates, max(1, len(candidates) // 50)):
        replacement = rnd.choice(_EDIT_WORDS)
        while replacement == words[index]:
            replacement = rnd.choice(_EDIT_WORDS)
        words[index] = replacement
    return " ".join(words)


# --- product reviews ------------------------------------------------------------------------------
_PRODUCTS = _items(
    """blender|kettle|phone case|backpack|desk lamp|coffee grinder|pair of headphones|keyboard|
    water bottle|vacuum cleaner|toaster|phone charger|umbrella|frying pan|tent|bike light|
    electric toothbrush|office chair|rice cooker|travel mug|yoga mat|smart watch|board game|
    hair dryer|bluetooth speaker|set of kitchen knives|winter jacket|pair of running shoes"""
)
_FEATURES = _items(
    """battery|handle|lid|cable|sound quality|build quality|zipper|switch|screen|fabric|motor|
    design|manual|packaging|strap|power button|finish|size|weight|colour"""
)
_POSITIVE = _items("excellent|sturdy|comfortable|reliable|well made|beautiful|solid|great|perfect")
_NEGATIVE = _items("flimsy|cheap|noisy|uncomfortable|awkward|disappointing|poorly made|useless")
_DURATIONS = _items(
    "two days|a week|ten days|two weeks|a month|six weeks|three months|half a year|a year"
)
_PEOPLE = _items("wife|husband|son|daughter|mother|father|partner|friend|brother|sister|roommate")
_REVIEW_SENTENCES: dict[str, tuple[str, ...]] = {
    "positive": _items(
        """I bought this {product} for my {person} and we both love it.|
        The {feature} is {pos} and the {feature2} works exactly as described.|
        Great value for the money.|
        After {duration} of daily use it still works like new.|
        Highly recommended!|
        Shipping was fast and the {product} arrived well packaged.|
        Much better than the {product} I had before.|
        Easy to set up, even for someone like me who is not good with gadgets.|
        I would definitely buy it again.|
        The {feature} feels {pos} and looks even better than in the pictures.|
        My {person} was so impressed that they ordered one too.|
        Five stars, no complaints at all."""
    ),
    "neutral": _items(
        """It does what it says, nothing more.|
        The {feature} is fine but the {feature2} could be better.|
        Average quality for the price.|
        It took {duration} to arrive, which was longer than promised.|
        Some parts feel {neg}, others are {pos}.|
        Not bad, but I expected a bit more from this brand.|
        The {feature} is smaller than I thought it would be.|
        It works, although the {feature} is a little {neg}."""
    ),
    "negative": _items(
        """The {product} stopped working after {duration}.|
        The {feature} is {neg} and feels cheap.|
        Customer service never answered my emails.|
        Not worth the money.|
        It arrived damaged and the {feature} was missing.|
        I returned it after {duration}.|
        The description was misleading.|
        Very disappointed with this purchase.|
        The {feature} broke the first time I used it.|
        Save your money and buy something else."""
    ),
}
_REVIEW_TITLES: dict[str, tuple[str, ...]] = {
    "positive": _items(
        """Great product|Love it!|Works perfectly|Excellent value|Five stars|Exactly as described|
        Better than expected|Very happy|Perfect gift|Does the job well"""
    ),
    "neutral": _items("It's okay|Decent for the price|Not bad|Average|Does the job|Mixed feelings"),
    "negative": _items(
        "Broke after a week|Do not buy|Waste of money|Disappointed|Poor quality|Returned it"
    ),
}
_RATING_WEIGHTS = (0.10, 0.06, 0.09, 0.20, 0.55)
"""Share of 1..5 stars, as in public product-review data (mostly five, a bump at one)."""
_STARS = (1, 2, 3, 4, 5)
_RATING_MIX = {
    1: ("negative",) * 5,
    2: ("negative", "negative", "negative", "neutral"),
    3: ("neutral", "neutral", "positive", "negative"),
    4: ("positive", "positive", "positive", "neutral"),
    5: ("positive",),
}
_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def sentiment_of(rating: int) -> str:
    """The sentiment label of a star rating: 1-2 negative, 3 neutral, 4-5 positive."""
    return "negative" if rating <= 2 else "neutral" if rating == 3 else "positive"


def generate_reviews(n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Yield ``n`` Amazon-review-like rows ``{"review_id", "rating", "title", "text"}``.

    Ratings 1-5 are skewed towards five stars; the title and sentences agree with the rating
    (see :func:`sentiment_of`). A few reviews are one short sentence, some run to ten.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rnd = random.Random(f"reviews:{seed}")
    for _ in range(n):
        rating = rnd.choices(_STARS, weights=_RATING_WEIGHTS)[0]
        mood = sentiment_of(rating)
        n_sentences = min(10, max(1, int(rnd.expovariate(1 / 3.2)) + 1))
        product = rnd.choice(_PRODUCTS)
        features = rnd.sample(_FEATURES, 2)
        sentences = []
        for _ in range(n_sentences):
            tone = rnd.choice(_RATING_MIX[rating])
            sentences.append(
                rnd.choice(_REVIEW_SENTENCES[tone]).format(
                    product=product,
                    person=rnd.choice(_PEOPLE),
                    feature=features[0],
                    feature2=features[1],
                    pos=rnd.choice(_POSITIVE),
                    neg=rnd.choice(_NEGATIVE),
                    duration=rnd.choice(_DURATIONS),
                )
            )
        text = " ".join(dict.fromkeys(sentences))  # no sentence twice in one review
        yield {
            "review_id": "R" + "".join(rnd.choices(_ID_ALPHABET, k=13)),
            "rating": rating,
            "title": rnd.choice(_REVIEW_TITLES[mood]),
            "text": text[0].upper() + text[1:],
        }


# --- instructions (supervised fine-tuning) --------------------------------------------------------
_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])(?:\s|$)")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")


def generate_instructions(n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Yield ``n`` instruction-tuning rows ``{"instruction", "input", "output"}``.

    A dozen task types (summary, title, sentiment, star rating, arithmetic, capitals,
    translation, sorting, word counts, lowercasing, listing, year extraction); every output is
    correct for its input. About a third of the rows have an empty ``input``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rnd = random.Random(f"instructions:{seed}")
    tasks = _tasks(_task_paragraphs(seed, 1200), generate_reviews(2**62, seed))
    for _ in range(n):
        instruction, task_input, output = rnd.choice(tasks)(rnd)
        yield {"instruction": instruction, "input": task_input, "output": output}


_Task = Callable[[random.Random], tuple[str, str, str]]
"""An instruction task: draws from the random stream it is given, returns ``(instruction, input,
output)``."""


def _tasks(
    paragraphs: Iterator[Mapping[str, Any]], reviews: Iterator[Mapping[str, Any]]
) -> tuple[_Task, ...]:
    """The task types of :func:`generate_instructions` (and :func:`generate_chats`), taking their
    texts from ``paragraphs`` (records with ``text`` and ``title``) and ``reviews``."""
    return (
        lambda r: _summarize(next(paragraphs)),
        lambda r: _suggest_title(next(paragraphs)),
        lambda r: _classify_sentiment(next(reviews)),
        lambda r: _predict_rating(next(reviews)),
        _arithmetic,
        _capital,
        _translate,
        _sort_words,
        lambda r: _count_words(next(paragraphs)),
        lambda r: _lowercase(next(paragraphs)),
        _list_items,
        lambda r: _extract_years(next(paragraphs)),
    )


def _task_paragraphs(seed: int, max_chars: int) -> Iterator[dict[str, Any]]:
    """English paragraphs of 150 to ``max_chars`` characters, for the tasks to summarize, title
    and count (an endless stream)."""
    return (
        record
        for record in generate_records(
            2**62, seed, languages=("en",), duplicate_fraction=0.0, style=PLAIN, with_meta=True
        )
        if record["kind"] == KIND_PARAGRAPH and 150 <= len(record["text"]) <= max_chars
    )


def _first_sentence(text: str) -> str:
    match = _FIRST_SENTENCE.match(text)
    return match.group(1) if match else text


def _summarize(record: Mapping[str, Any]) -> tuple[str, str, str]:
    text = record["text"]
    return "Summarize the following paragraph in one sentence.", text, _first_sentence(text)


def _suggest_title(record: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        "Which encyclopedia article is the following paragraph most likely taken from?",
        record["text"],
        record["title"],
    )


def _classify_sentiment(review: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        "Classify the sentiment of this product review as positive, negative or neutral.",
        review["text"],
        sentiment_of(review["rating"]),
    )


def _predict_rating(review: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        "How many stars, from 1 to 5, did the author of this review most likely give?",
        f"{review['title']}. {review['text']}",
        str(review["rating"]),
    )


def _arithmetic(rnd: random.Random) -> tuple[str, str, str]:
    a, b = rnd.randint(2, 999), rnd.randint(2, 99)
    name, result = rnd.choice(
        (("plus", a + b), ("minus", a - b), ("times", a * b), ("plus", a + b))
    )
    return f"What is {a} {name} {b}?", "", f"{a} {name} {b} is {result}."


def _capital(rnd: random.Random) -> tuple[str, str, str]:
    country = rnd.choice(tuple(_CAPITALS))
    capital = _CAPITALS[country]
    end = "" if capital.endswith(".") else "."  # "Washington, D.C." ends the sentence itself
    return f"What is the capital of {country}?", "", f"The capital of {country} is {capital}{end}"


def _translate(rnd: random.Random) -> tuple[str, str, str]:
    word = rnd.choice(tuple(_DICTIONARY))
    index = rnd.randrange(3)
    language = _LANGUAGE_NAMES[LANGUAGES[index + 1]]
    foreign = _DICTIONARY[word][index]
    instruction = f'Translate the word "{word}" into {language}.'
    return instruction, "", f'In {language}, "{word}" is "{foreign}".'


def _sort_words(rnd: random.Random) -> tuple[str, str, str]:
    words = rnd.sample(_NOUNS, rnd.randint(4, 9))
    return "Sort the following words alphabetically.", ", ".join(words), ", ".join(sorted(words))


def _count_words(record: Mapping[str, Any]) -> tuple[str, str, str]:
    sentence = _first_sentence(record["text"])
    count = len(re.findall(r"[A-Za-zÀ-ÿ0-9'’£$-]+(?:[.,][0-9]+)*", sentence))
    return "How many words are in the following sentence?", sentence, str(count)


def _lowercase(record: Mapping[str, Any]) -> tuple[str, str, str]:
    sentence = _first_sentence(record["text"])
    return "Rewrite the following sentence in lowercase letters.", sentence, sentence.lower()


def _list_items(rnd: random.Random) -> tuple[str, str, str]:
    category, pool = rnd.choice(
        (
            ("European capital cities", ("Paris", "Berlin", "Rome", "Madrid", "Lisbon", "Vienna")),
            ("colours", ("red", "blue", "green", "yellow", "purple", "orange", "white")),
            ("fruits", ("apple", "pear", "banana", "cherry", "plum", "orange", "grape")),
            ("musical instruments", ("piano", "violin", "guitar", "flute", "trumpet", "cello")),
        )
    )
    items = rnd.sample(pool, 3)
    output = "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))
    return f"List three {category}.", "", output


def _extract_years(record: Mapping[str, Any]) -> tuple[str, str, str]:
    text = record["text"]
    years = list(dict.fromkeys(_YEAR.findall(text)))
    output = ", ".join(years) if years else "The text mentions no year."
    return "List the years mentioned in the following text, in order of appearance.", text, output


# --- chats (conversations for supervised fine-tuning) ---------------------------------------------
_CHAT_RECORDS_SEED = 1 << 32
"""Added to the seed of the paragraphs :func:`generate_chats` draws its texts from, so that they
are not the paragraphs of :func:`generate_instructions` or of a corpus of a small seed."""
_SYSTEM_PROMPTS = _items(
    """You are a helpful assistant.|
    You are a helpful assistant. Answer accurately and briefly.|
    You are a careful assistant: answer exactly what is asked, nothing more.|
    You are an assistant for an encyclopedia project. You summarize and classify texts, answer
    questions about places, words and numbers, and do small calculations."""
)
_SYSTEM_SHARE = 1 / 3
_EXCHANGE_COUNTS = (1, 2, 3)
_EXCHANGE_WEIGHTS = (0.5, 0.3, 0.2)
_FOLLOW_UP_SHARE = 0.4
"""Of the later exchanges whose previous question allows one: the share that asks about it again
(``Thanks! And what is that times 7?``) rather than asking something else."""
_NEXT_OPENERS = ("Thanks! And ", "Great, thank you. ", "One more question. ", "Next: ", "")
"""Put before a later exchange's question (after ``Thanks! And `` it starts in lowercase)."""
_ARITHMETIC_QUESTION = re.compile(r"What is (-?\d+) (plus|minus|times) (\d+)\?")
_TRANSLATE_QUESTION = re.compile(r'Translate the word "([a-z]+)" into ([A-Z][a-z]+)\.')
_OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "plus": int.__add__,
    "minus": int.__sub__,
    "times": int.__mul__,
}


def generate_chats(n: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Yield ``n`` conversation rows ``{"id", "messages"}`` for chat fine-tuning.

    ``messages`` is a list of ``{"role", "content"}``: about a third start with a ``system``
    message (one of a few prompts), then 1 to 3 exchanges of a ``user`` question and the
    ``assistant``'s answer; the last message is always the assistant's. The questions are
    :func:`generate_instructions`' tasks (the content is the instruction, then a blank line and
    the input when there is one); a later question is another task (``Thanks! And ...``) or a
    follow-up on the previous one (the same sum carried on, the same word in another language).
    Every answer is correct for its question. Ids are ``chat-<seed>-<i>`` (``i`` in 8 digits).

    A random stream of its own: the instructions and the sample files do not change with it.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rnd = random.Random(f"chats:{seed}")
    tasks = _tasks(_task_paragraphs(seed + _CHAT_RECORDS_SEED, 800), _chat_reviews(seed))
    for i in range(n):
        messages: list[dict[str, str]] = []
        if rnd.random() < _SYSTEM_SHARE:
            messages.append({"role": "system", "content": rnd.choice(_SYSTEM_PROMPTS)})
        exchanges = rnd.choices(_EXCHANGE_COUNTS, weights=_EXCHANGE_WEIGHTS)[0]
        previous: tuple[str, str, str] | None = None
        for exchange in range(exchanges):
            follow_up = _follow_up(previous, rnd) if previous is not None else None
            if follow_up is not None and rnd.random() < _FOLLOW_UP_SHARE:
                question, answer = follow_up
                previous = None  # a follow-up is not followed up again
            else:
                previous = rnd.choice(tasks)(rnd)
                instruction, task_input, answer = previous
                question = instruction + (f"\n\n{task_input}" if task_input else "")
                if exchange:
                    question = _next_question(question, rnd)
            messages.append({"role": "user", "content": question})
            messages.append({"role": "assistant", "content": answer})
        yield {"id": f"chat-{seed}-{i:08d}", "messages": messages}


def _chat_reviews(seed: int) -> Iterator[dict[str, Any]]:
    """Reviews for :func:`generate_chats`: like :func:`generate_reviews` on a stream of their
    own (``generate_reviews(..., seed)`` is what the instructions of that seed use)."""
    return generate_reviews(2**62, seed + _CHAT_RECORDS_SEED)


def _next_question(question: str, rnd: random.Random) -> str:
    opener = rnd.choice(_NEXT_OPENERS)
    if opener.endswith("And "):
        return opener + question[0].lower() + question[1:]
    return opener + question


def _follow_up(task: tuple[str, str, str], rnd: random.Random) -> tuple[str, str] | None:
    """A question about the previous task's question and its correct answer, or None if there is
    none for this task (only arithmetic and translations have one)."""
    instruction = task[0]
    if match := _ARITHMETIC_QUESTION.fullmatch(instruction):
        a, name, b = int(match[1]), match[2], int(match[3])
        result = _OPERATIONS[name](a, b)
        name, c = rnd.choice((("plus", rnd.randint(2, 99)), ("times", rnd.randint(2, 9))))
        return (
            f"Thanks! And what is that {name} {c}?",
            f"{result} {name} {c} is {_OPERATIONS[name](result, c)}.",
        )
    if match := _TRANSLATE_QUESTION.fullmatch(instruction):
        word, language = match[1], match[2]
        others = [
            (code, name)
            for code, name in _LANGUAGE_NAMES.items()
            if code != "en" and name != language
        ]
        code, name = rnd.choice(others)
        foreign = _DICTIONARY[word][LANGUAGES.index(code) - 1]
        return f"Thanks! And in {name}?", f'In {name}, "{word}" is "{foreign}".'
    return None


# --- writing files --------------------------------------------------------------------------------
GENERATORS: dict[str, Callable[..., Iterator[dict[str, Any]]]] = {
    "corpus": generate_records,
    "reviews": generate_reviews,
    "instructions": generate_instructions,
    "chats": generate_chats,
}
"""The generators :func:`write_corpus` and the command line know by name."""


def detect_format(path: str | Path) -> str:
    """The format named by ``path``'s suffix (one of :data:`FORMATS`, without the dot)."""
    name = Path(path).name.lower()
    for suffix in sorted(FORMATS, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix[1:]
    raise ValueError(f"{path}: unsupported suffix; use one of {', '.join(FORMATS)}")


def write_corpus(
    path: str | Path,
    rows: int | Iterable[Mapping[str, Any]],
    seed: int = 0,
    *,
    kind: str = "corpus",
    text_field: str = "text",
    progress: Callable[[int], None] | None = None,
    **kwargs: Any,
) -> Path:
    """Write generated rows to ``path`` in the format its suffix names; return the path.

    Args:
        path: ``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``, ``.parquet``, ``.csv`` or ``.txt``
            (TXT: only the ``text_field`` of each row, rows separated by a blank line; rows
            without a string there, such as chats, are refused with a ValueError. CSV: a list or
            dict value, such as a chat's messages, is written as a JSON string cell). Parent
            folders are created. Compressed files are byte-identical for identical rows (no
            timestamps).
        rows: how many rows to generate with the ``kind`` generator (:data:`GENERATORS`), or
            the rows themselves (any iterable of mappings, e.g. ``generate_records(...)``).
        seed: the generator's seed (ignored when ``rows`` are given).
        kind: ``corpus``, ``reviews``, ``instructions`` or ``chats``.
        text_field: the field a TXT file takes from each row.
        progress: called with the number of rows written so far after every chunk.
        **kwargs: passed to the generator (e.g. ``duplicate_fraction`` for ``corpus``).
    """
    path = Path(path)
    fmt = detect_format(path)
    if isinstance(rows, int):
        if kind not in GENERATORS:
            raise ValueError(f"kind must be one of {sorted(GENERATORS)}, got {kind!r}")
        records: Iterable[Mapping[str, Any]] = GENERATORS[kind](rows, seed, **kwargs)
    elif kwargs:
        raise TypeError(f"generator options {sorted(kwargs)} given with explicit rows")
    else:
        records = rows
    if fmt == "txt":  # refuse rows without a text before creating the file
        records = iter(records)
        first = next(records, None)
        if first is not None:
            _TxtSink.check(first, text_field)
            records = itertools.chain((first,), records)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = _WRITERS[fmt]
    written = 0
    try:
        with writer(path, text_field) as sink:
            for chunk in _chunks(records, _WRITE_CHUNK):
                sink.write(chunk)
                written += len(chunk)
                if progress is not None:
                    progress(written)
    except ValueError:  # a row the format cannot hold: no half-written file
        path.unlink(missing_ok=True)
        raise
    return path


def _chunks(rows: Iterable[Mapping[str, Any]], size: int) -> Iterator[list[Mapping[str, Any]]]:
    chunk: list[Mapping[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Sink:
    """Writes chunks of rows to one file; a context manager that closes what it opened."""

    def __init__(self, path: Path, text_field: str) -> None:
        self.path = path
        self.text_field = text_field
        self._closers: list[Any] = []

    def __enter__(self) -> _Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        for closer in reversed(self._closers):
            closer.close()

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        raise NotImplementedError


class _JsonlSink(_Sink):
    def __init__(self, path: Path, text_field: str, compression: str | None = None) -> None:
        super().__init__(path, text_field)
        raw = open(path, "wb")  # noqa: SIM115 - closed by __exit__
        self._closers.append(raw)
        self.stream: IO[bytes] = raw
        if compression == "gz":
            # no file name and mtime 0 in the header: the same rows give the same bytes
            self.stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
            self._closers.append(self.stream)
        elif compression == "zst":
            compressor = zstandard.ZstdCompressor(level=10)
            self.stream = compressor.stream_writer(raw, closefd=False)
            self._closers.append(self.stream)

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        dumps = json.dumps
        self.stream.write(
            "".join(dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")
        )


class _ParquetSink(_Sink):
    def __init__(self, path: Path, text_field: str) -> None:
        super().__init__(path, text_field)
        self.writer: pq.ParquetWriter | None = None

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        if self.writer is None:
            table = pa.Table.from_pylist(rows)
            self.writer = pq.ParquetWriter(self.path, table.schema, compression="zstd")
            self._closers.append(self.writer)
        else:
            table = pa.Table.from_pylist(rows, schema=self.writer.schema)
        self.writer.write_table(table)

    def __exit__(self, *exc: object) -> None:
        if self.writer is None:  # no rows: still a valid (empty) file
            pq.write_table(pa.table({self.text_field: pa.array([], pa.string())}), self.path)
        super().__exit__(*exc)


class _CsvSink(_Sink):
    def __init__(self, path: Path, text_field: str) -> None:
        super().__init__(path, text_field)
        self.handle = open(path, "w", encoding="utf-8", newline="")  # noqa: SIM115
        self._closers.append(self.handle)
        self.writer: Any = None

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        if self.writer is None:
            self.writer = csv.DictWriter(self.handle, fieldnames=list(rows[0]), lineterminator="\n")
            self.writer.writeheader()
        self.writer.writerows(map(_csv_cells, rows))


def _csv_cells(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """``row`` with each list or dict value as JSON (the csv module would write its Python repr):
    a chat's ``messages`` become a JSON string cell, which ingest's ``chat_field`` reads."""
    if not any(isinstance(value, (list, dict)) for value in row.values()):
        return row
    return {
        name: json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else value
        for name, value in row.items()
    }


class _TxtSink(_Sink):
    def __init__(self, path: Path, text_field: str) -> None:
        super().__init__(path, text_field)
        self.handle = open(path, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        self._closers.append(self.handle)
        self.first = True

    @staticmethod
    def check(row: Mapping[str, Any], text_field: str) -> None:
        """ValueError unless ``row`` has a string ``text_field`` (all a TXT file keeps)."""
        if not isinstance(row.get(text_field), str):
            fields = ", ".join(row) or "none"
            raise ValueError(
                f"a .txt file holds only the string field {text_field!r} of each row, and this "
                f"row has none (its fields: {fields}); write .jsonl, .jsonl.gz, .jsonl.zst, "
                ".parquet or .csv instead"
            )

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        for row in rows:
            self.check(row, self.text_field)
            lines = row[self.text_field].splitlines()
            paragraph = "\n".join(line for line in lines if line.strip())
            if not paragraph:
                continue  # a blank paragraph cannot be written: blank lines separate them
            self.handle.write(("" if self.first else "\n") + paragraph + "\n")
            self.first = False


_WRITERS: dict[str, Callable[[Path, str], _Sink]] = {
    "jsonl": _JsonlSink,
    "jsonl.gz": lambda path, field: _JsonlSink(path, field, "gz"),
    "jsonl.zst": lambda path, field: _JsonlSink(path, field, "zst"),
    "parquet": _ParquetSink,
    "csv": _CsvSink,
    "txt": _TxtSink,
}


# --- the shipped sample ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PlantedLine:
    """A deliberately bad (or odd) line of a shipped JSONL file (``wiki_sample.jsonl``,
    ``chats.jsonl``) and what ingest makes of it."""

    line: int
    """1-based line number in the file."""
    reason: str | None
    """The ingest reject reason it must produce; None for a line that is kept."""
    description: str
    raw: bytes
    """The exact bytes of the line, without its newline."""


SAMPLE_WIKI_LINES = 2500
"""Lines of ``wiki_sample.jsonl``: generated records plus the planted lines."""
PLANTED_LINES: tuple[PlantedLine, ...] = (
    PlantedLine(
        42,
        "invalid_json",
        "malformed JSON: a comma is missing between two fields",
        b'{"text": " The survey of the estate was never completed . \\n" "title": "Planted", '
        b'"id": "planted-invalid-json"}',
    ),
    PlantedLine(
        404,
        "invalid_utf8",
        "invalid UTF-8: Latin-1 bytes (0xE9 0xE8) inside an otherwise valid JSON line",
        b'{"text": " The caf\xe9 near the chapel was rebuilt in 1887 by the m\xe8re . \\n", '
        b'"title": "Planted", "id": "planted-invalid-utf8"}',
    ),
    PlantedLine(
        777,
        "missing_text",
        'an object without a "text" field (the prose is under "body")',
        b'{"body": " The old mill was closed in 1921 . \\n", "title": "Planted", '
        b'"id": "planted-missing-text"}',
    ),
    PlantedLine(
        1234,
        "non_string_text",
        '"text" is a number (1234567), not a string',
        b'{"text": 1234567, "title": "Planted", "id": "planted-number-text"}',
    ),
    PlantedLine(
        1800,
        "not_an_object",
        "valid JSON that is a list, not an object",
        b'["planted-not-an-object", " A JSON array where an object belongs . \\n"]',
    ),
    PlantedLine(
        2222,
        None,
        'a whitespace-only "text": a valid record, kept by ingest, empty once normalized',
        b'{"text": "   \\n", "title": "Planted", "id": "planted-blank-text"}',
    ),
)
"""The six planted lines of ``data/sample/wiki_sample.jsonl`` (see ``data/README.md``)."""

SAMPLE_CHATS = 120
"""Generated conversations in ``chat/chats.jsonl``."""
PLANTED_CHAT_LINES: tuple[PlantedLine, ...] = (
    PlantedLine(
        37,
        "invalid_chat",
        "the last message is the user's: a conversation without an answer to learn",
        b'{"id": "planted-last-user", "messages": [{"role": "user", "content": "What is the '
        b'capital of Peru?"}, {"role": "assistant", "content": "The capital of Peru is Lima."}, '
        b'{"role": "user", "content": "Thanks! And what is the capital of Bolivia?"}]}',
    ),
    PlantedLine(
        101,
        "missing_text",
        '"messages": null',
        b'{"id": "planted-null-messages", "messages": null}',
    ),
)
"""The two planted lines of ``data/chat/chats.jsonl``, read with ``chat_field: messages`` (see
``data/README.md``)."""
SAMPLE_CHAT_LINES = SAMPLE_CHATS + len(PLANTED_CHAT_LINES)
"""Lines of ``chat/chats.jsonl``: the generated conversations plus the planted lines."""


def make_sample(root: str | Path = DATA_DIR, seed: int = SAMPLE_SEED) -> dict[str, int]:
    """(Re)write the shipped sample under ``root``: ``sample/`` (what the pipeline reads by
    default), ``instructions/instructions.jsonl`` and ``chat/chats.jsonl`` (SFT rows, not read by
    default).

    The result is byte-identical for the same seed (and pyarrow version, for the Parquet file).
    Returns each file's path relative to ``root`` and its number of rows (lines for
    ``wiki_sample.jsonl`` and ``chats.jsonl``, paragraphs for ``notes.txt``).
    """
    root = Path(root)
    sample = root / "sample"
    counts: dict[str, int] = {}

    def write(name: str, rows: Iterable[Mapping[str, Any]]) -> None:
        materialized = list(rows)
        write_corpus(root / name, materialized)
        counts[name] = len(materialized)

    counts["sample/wiki_sample.jsonl"] = _write_wiki_sample(sample / "wiki_sample.jsonl", seed)
    write("sample/wiki_more.jsonl.gz", generate_records(300, seed + 1))
    write("sample/wiki_more.jsonl.zst", generate_records(300, seed + 2))
    write(
        "sample/wiki_table.parquet",
        (
            {**record, "url": "https://en.wikipedia.org/wiki/" + record["title"].replace(" ", "_")}
            for record in generate_records(300, seed + 3)
        ),
    )
    write("sample/reviews.csv", generate_reviews(200, seed))
    notes = (
        record
        for record in generate_records(10**6, seed + 4, style=PLAIN, with_meta=True)
        if record["kind"] == KIND_PARAGRAPH and record["lang"] == "en"
    )
    write(
        "sample/notes.txt",
        ({"text": textwrap.fill(next(notes)["text"], width=88)} for _ in range(40)),
    )
    write("instructions/instructions.jsonl", generate_instructions(200, seed))
    counts["chat/chats.jsonl"] = _write_planted(
        root / "chat" / "chats.jsonl", generate_chats(SAMPLE_CHATS, seed), PLANTED_CHAT_LINES
    )
    return counts


def _write_wiki_sample(path: Path, seed: int) -> int:
    """Generated records with :data:`PLANTED_LINES` at their line numbers; returns the lines."""
    records = generate_records(SAMPLE_WIKI_LINES - len(PLANTED_LINES), seed)
    return _write_planted(path, records, PLANTED_LINES)


def _write_planted(
    path: Path, rows: Iterator[Mapping[str, Any]], planted_lines: Sequence[PlantedLine]
) -> int:
    """JSONL of ``rows`` with ``planted_lines`` at their line numbers (a row after the last
    planted line is written too); returns the lines written."""
    planted = {p.line: p.raw for p in planted_lines}
    path.parent.mkdir(parents=True, exist_ok=True)
    line = 0
    with open(path, "wb") as handle:
        while True:
            line += 1
            raw = planted.pop(line, None)
            if raw is None:
                row = next(rows, None)
                if row is None:
                    break
                raw = json.dumps(row, ensure_ascii=False).encode("utf-8")
            handle.write(raw + b"\n")
    if planted:
        raise ValueError(f"{path}: too few rows for the planted lines {sorted(planted)}")
    return line - 1


# --- command line ---------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llm_assets.datagen``: write generated rows, or regenerate the sample."""
    parser = argparse.ArgumentParser(
        prog="python -m llm_assets.datagen",
        description="Write deterministic generated text data (no network).",
    )
    parser.add_argument("--rows", type=int, default=200_000, help="rows to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        help="output file; the suffix picks the format: " + ", ".join(FORMATS),
    )
    parser.add_argument("--kind", choices=sorted(GENERATORS), default="corpus")
    parser.add_argument("--duplicate-fraction", type=float, default=0.02, help="corpus only")
    parser.add_argument("--foreign-fraction", type=float, default=0.05, help="corpus only")
    parser.add_argument(
        "--languages", default=",".join(DEFAULT_LANGUAGES), help="corpus only, comma-separated"
    )
    parser.add_argument("--style", choices=STYLES, default=WIKITEXT, help="corpus only")
    parser.add_argument(
        "--sample",
        action="store_true",
        help="regenerate the shipped sample instead (under --out, default: the repo's data/)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.sample:
        counts = make_sample(args.out or DATA_DIR, args.seed)
        for name, rows in counts.items():
            print(f"{name}: {rows} rows", file=sys.stderr)
        return 0
    if args.out is None:
        parser.error("--out is required (or --sample)")
    options: dict[str, Any] = {}
    if args.kind == "corpus":
        options = {
            "duplicate_fraction": args.duplicate_fraction,
            "foreign_fraction": args.foreign_fraction,
            "languages": tuple(code.strip() for code in args.languages.split(",") if code),
            "style": args.style,
        }
    last_report = [started]

    def progress(written: int) -> None:
        now = time.perf_counter()
        if now - last_report[0] >= 1.0 or written == args.rows:
            last_report[0] = now
            rate = written / max(now - started, 1e-9)
            print(f"{written:,}/{args.rows:,} rows ({rate:,.0f} rows/s)", file=sys.stderr)

    try:
        path = write_corpus(
            args.out, args.rows, args.seed, kind=args.kind, progress=progress, **options
        )
    except ValueError as exc:  # the generators check their options before writing anything
        parser.error(str(exc))
    elapsed = time.perf_counter() - started
    print(f"wrote {args.rows:,} rows to {path} in {elapsed:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
