"""A 2-rank Hugging Face Trainer job (DDP on gloo, CPU) as people write it, for
tests/e2e/test_straggler_hf.py: a GPT-2 of two tiny layers built from its config (nothing
downloaded), one sequence a step from a Dataset whose ``__getitem__`` sleeps 40 ms on
``SLOW_RANK`` (a slow reader). The slow rank's time outside a wait goes to two places: the
reader, and the line that calls ``Trainer.train`` (the Trainer's own work: forward, backward,
the optimizer, its loop, none of it in a function of the script), as long on every rank: the
launcher names the reader, where its time goes that the others' does not (monitor/straggler.py's
``own_place``). Run as ``train.py OUT_DIR SLOW_RANK``: writes OUT_DIR/training at its first step
and stops at the next 25th step after OUT_DIR/stop appears (rank 0 tells every rank by a
broadcast, so all stop at the same step)."""
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

warnings.filterwarnings("ignore")
out, slow = sys.argv[1], int(sys.argv[2])
rank = int(os.environ["RANK"])
SEQ, VOCAB = 32, 256


class Sequences(torch.utils.data.Dataset):
    def __len__(self):
        return 10 ** 6

    def __getitem__(self, i):
        if rank == slow:
            time.sleep(0.04)
        ids = torch.randint(VOCAB, (SEQ,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


class StopFile(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if rank == 0 and state.global_step == 1:
            with open(os.path.join(out, "training"), "w") as f:
                f.write(repr(time.time()))
        if state.global_step % 25 == 0:
            stop = [os.path.exists(os.path.join(out, "stop"))]
            dist.broadcast_object_list(stop, src=0)
            control.should_training_stop = bool(stop[0])


config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=2,
                    bos_token_id=0, eos_token_id=0)
args = TrainingArguments(output_dir=os.path.join(out, "hf"), use_cpu=True, ddp_backend="gloo",
                         per_device_train_batch_size=1, max_steps=10 ** 6, learning_rate=1e-3,
                         save_strategy="no", logging_strategy="no", report_to="none",
                         disable_tqdm=True, remove_unused_columns=False, dataloader_num_workers=0)
Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Sequences(),
        callbacks=[StopFile()]).train()
# No interpreter finalization: with torch's gloo threads about, a C++ destructor at exit aborts
# the process now and then ("terminate called without an active exception", SIGABRT; seen
# under torchrun as under mpilaunch, docs/FROM_TORCHRUN.md); the run the test reads is over.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
