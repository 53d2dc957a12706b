#!/usr/bin/env bash
# Samples the machine's CPU time every 5 s into a CSV, for bench/summarize.py's CPU steal
# section: epoch seconds, then /proc/stat's aggregate "cpu" counters (USER_HZ ticks, all CPUs).
# Steal is time the hypervisor ran other guests while this VM had work: on a shared VM it is
# what moves a whole round's rates (seen: 16-75% during one full run).
#   bench/cpu_sampler.sh OUT.csv &   (bench/run starts it after the fingerprint, kills it at exit)
out=${1:?usage: bench/cpu_sampler.sh OUT.csv}
echo "epoch,user,nice,system,idle,iowait,irq,softirq,steal" >"$out"
while true; do
    read -r _ user nice system idle iowait irq softirq steal _ </proc/stat
    echo "$(date +%s),$user,$nice,$system,$idle,$iowait,$irq,$softirq,$steal" >>"$out"
    sleep 5
done
