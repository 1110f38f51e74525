#!/bin/bash
# the output layer record at 942c3ce: both parts at 600 tokens with --before, then WikiText-103's batch one layer a process
source /work/venv/bin/activate
cd /work/main
o=/tmp/ol2
python benchmarks/output_layer.py --sizes 10000x500,44000x500,44000x1024,267735x1024 --before --json $o/output_layer.json > $o/output_layer.log 2>&1
for layer in plain fused adaptive; do
  python benchmarks/output_layer.py --sizes 267735x1024 --batch 128 --bptt 35 --parts step --steps 1 --models hornn --layers $layer --json $o/wt103_$layer.json > $o/wt103_$layer.log 2>&1
done
python benchmarks/output_layer.py --sizes 267735x1024 --batch 128 --bptt 35 --parts step --steps 1 --models hornn --layers plain --before --json $o/wt103_before.json > $o/wt103_before.log 2>&1
echo done > $o/DONE
