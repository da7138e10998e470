import sys, csv, statistics, collections
name = sys.argv[1]
d = collections.defaultdict(list)
for order in ('ab', 'ba'):
    rows = [r for r in csv.reader(open(f'{name}-{order}.csv')) if r and r[0] == 'osprey']
    labels = [l.split()[0] for l in open(f'{name}-{order}-order.log') if l.strip()]
    assert len(rows) == len(labels)
    for r, w in zip(rows, labels):
        which = ('old' if w == 'before' else 'new') if order == 'ab' else ('new' if w == 'before' else 'old')
        d[(r[1], r[2], which)].append(float(r[3]))
print("mode config old_median new_median new/old n")
for m, c in sorted({(m, c) for (m, c, w) in d}):
    o, n = d[(m, c, 'old')], d[(m, c, 'new')]
    print(f"{m} {c} {statistics.median(o):.0f} {statistics.median(n):.0f} {statistics.median(n)/statistics.median(o):.3f} {len(o)}/{len(n)}")
