"""Pieces of one recording, read off what a record names: a source id, the file, chunk files of a take."""

from signalchain.checks.pieces import count_recordings, named_source, piece_stem, sources


def test_a_record_names_its_source_most_explicit_first():
    assert named_source({"source_id": "rec-7", "path": "/a/b.wav"}) == ("id", "rec-7")
    chunk = "train/take01_chunk003.wav"
    assert named_source({"file_name": chunk, "text": "x"}) == ("file", chunk)
    seg = {"description": "x", "meta": {"path": "/data/song.wav", "duration": 30.0}, "seek_time": 12.5}
    assert named_source(seg) == ("file", "/data/song.wav")  # AudioCraft's SegmentInfo
    assert named_source({"id": "clip123", "tags": ["a"]}) is None and named_source(None) is None


def test_piece_numbers_come_off_the_stem():
    assert piece_stem("/d/take01_chunk003.wav") == "/d/take01"
    assert piece_stem("song-a.part2.flac") == "song-a"
    assert piece_stem("x/song_007.wav") == "x/song"
    assert piece_stem("x/intro.wav") == "x/intro"


def test_chunks_are_one_source_only_where_their_stem_keeps_one_caption():
    chunks = [("file", f"take{t}_{k:03d}.wav") for t in range(2) for k in range(3)]
    caps = [f"caption of take {t}" for t in range(2) for _ in range(3)]
    assert len(set(sources(chunks, caps))) == 2
    # a numbered dataset: one stripped name, many captions; each file is its own source
    numbered = [("file", f"data/{i:04d}.wav") for i in range(6)]
    assert len(set(sources(numbered, ["music", "music", "rock", "jazz", "folk", "pop"]))) == 6
    # explicit ids win over names, and a record naming nothing is its own source
    assert sources([("id", "a"), ("id", "a"), None], ["x", "x", "x"]) == ["id:a", "id:a", None]


def test_recordings_counted_over_rows():
    segs = [("c1", {"meta": {"path": "/f1.wav"}, "seek_time": float(i)}) for i in range(5)]
    segs += [("c2", {"meta": {"path": "/f2.wav"}, "seek_time": float(i)}) for i in range(5)]
    assert count_recordings(segs) == 2
    assert count_recordings([("c", {"title": "t"})]) is None
