"""dataloader-main-process on literal trees."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.dataloader import DataLoaderRule
from deepcontext.analysis.testing import TORCH_DIR, build, lib, op, user

DL = f"{TORCH_DIR}/utils/data/dataloader.py"
REST = ([user(30), op("aten::addmm")], {"cpu.time": 0.9})


def loading(seconds, cls="_SingleProcessDataLoaderIter"):
    frames = [user(20), lib("_BaseDataLoaderIter.__next__", DL, 733),
              lib(f"{cls}._next_data", DL, 789),
              lib(f"{cls}._next_data", DL, 790),  # nested frame of the same iterator
              lib("fetch", f"{TORCH_DIR}/utils/data/_utils/fetch.py", 52)]
    return (frames, {"cpu.time": seconds})


def run(*paths):
    return analyze(build([REST, *paths]), rules=[DataLoaderRule()])


def test_main_process_loading_fires_at_the_loop_line():
    (f,) = run(loading(0.1))
    assert f.location.line == 20 and f.severity == "warning"
    assert f.evidence["loading_time_s"] == 0.1  # nested loader frames counted once
    assert "num_workers" in f.suggestion


def test_below_five_percent_is_only_a_note():
    (f,) = run(loading(0.04))
    assert f.severity == "note"


def test_worker_processes_are_quiet():
    assert run(loading(0.3, cls="_MultiProcessingDataLoaderIter")) == []


def test_the_dataloaders_record_function_op_measures_loading():
    frames = [user(21), lib("_BaseDataLoaderIter.__next__", DL, 721),
              op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")]
    (f,) = run((frames, {"op.time": 0.08, "op.count": 33}),
               (frames + [op("aten::stack")], {"op.time": 0.01, "op.count": 32}))
    assert f.location.line == 21 and f.evidence["loading_time_s"] == 0.09


def test_waiting_on_worker_processes_is_not_this_rule():
    frames = [user(21), op("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")]
    assert run((frames, {"op.time": 0.3, "op.count": 33})) == []


def test_a_hugging_face_trainers_loader_gets_the_training_arguments_fix():
    # The Trainer builds its DataLoader (transformers 5.24's path: train -> ... ->
    # get_batch_samples -> the iterator); the user's line is the train() call.
    hf = "/usr/lib/python3.11/site-packages/transformers/trainer.py"
    frames = [user(15), lib("Trainer.train", hf, 1576),
              lib("Trainer._inner_training_loop", hf, 1660),
              lib("Trainer.get_batch_samples", hf, 2299),
              lib("_BaseDataLoaderIter.__next__", DL, 721),
              op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")]
    (f,) = run((frames, {"op.time": 0.08, "op.count": 8}))
    assert f.location.line == 15 and f.message.startswith("The Trainer at train.py:15 fetches")
    assert f.suggestion.startswith("the Hugging Face Trainer builds this DataLoader: load in "
                                   "worker processes with TrainingArguments(..., "
                                   "dataloader_num_workers=4, ")
    (plain,) = run(loading(0.1))
    assert plain.suggestion.startswith("load in worker processes: DataLoader(dataset, ")
