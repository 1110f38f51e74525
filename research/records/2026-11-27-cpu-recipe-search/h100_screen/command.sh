export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 P=python3 T=${T:-200} E=${E:-40};S=/tmp/sc;R=/tmp/r;mkdir -p $S $R;cat>$S/sitecustomize.py<<'E'
import os
if os.environ.get("RINIT")=="scaled":
 import math,torch
 from hornn_dist.models import lm
 o=lm.RecurrentLM.reset_parameters
 def r(s):
  o(s);c=s.cfg
  if c.arch not in("hornn","rnn"):return
  w=[1.]if c.arch=="rnn"else[c.alpha**n for n in range(1,c.order+1)]if c.pooling=="fofe"else[.5]*c.order if c.pooling=="gated"else[1.]*c.order
  d=1/math.sqrt(c.hidden_size*sum(x*x for x in w))
  with torch.no_grad():
   for l in s.layers:l.weight_hh[:,:l.order*l.hidden_size].normal_(0,d)
   for n,p in(s.rnn.named_parameters()if s.rnn is not None else[]):
    if n.startswith("weight_hh"):p.normal_(0,d)
 lm.RecurrentLM.reset_parameters=r
E
export PYTHONPATH=$S:$PWD;(date -u;git rev-parse HEAD;nvidia-smi -L;nproc)>$R/info.txt 2>&1;$P -m hornn_dist.prepare configs/demo.toml>$R/prep.log 2>&1
B="configs/demo.toml --set train.epochs=$E --set train.checkpoint_every=0 --set log.every=400 --set log.tensorboard=false $X"
g(){ RINIT=$2 timeout $T $P -m hornn_dist.train $B $3 --set optim.clip_mode=$4 --set optim.clip=$5 --set train.output_dir=$R/$1>$R/$1.log 2>&1 & }
o="--set model.order=1 --set model.pooling=sum";l="--set model.arch=lstm"
for m in sum max fofe gated;do h="--set model.pooling=$m";g $m-sv5 scaled "$h" value 5.0;g $m-sn025 scaled "$h" norm 0.25;done
g rnn-sv5 scaled "$o" value 5.0;g rnn-sn025 scaled "$o" norm 0.25;g rnn-pn025 paper "$o" norm 0.25
g sum-pn025 paper "--set model.pooling=sum" norm 0.25;g max-pn025 paper "--set model.pooling=max" norm 0.25
g fofe-pv5 paper "--set model.pooling=fofe" value 5.0;g gated-pv5 paper "--set model.pooling=gated" value 5.0
g lstm-v5 paper "$l" value 5.0
wait;cd /tmp;tar czf $OUT/r.tgz --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' r;grep "valid ppl" r/*.log|cut -c1-120;grep -c "epoch .* done" r/*.log
