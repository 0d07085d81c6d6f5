#!/usr/bin/env python3
"""Writes ip2region xdb files from a few ranges, by the format's description (ip2region's
maker/golang README and binding/golang/xdb): a 256-byte header, a 256x256 vector index of
(first, last) segment pointers by the address's first two bytes, the region texts, then the
segment index (IPv4 in format 2.0: start and end little-endian; IPv6 in format 3.0: in network
order). Then asks ip2region's own Python searcher (PyPI py-ip2region) what each probe address
gives, and writes that as the answers the gateway's reader must give.

Usage: write-xdb.py OUT_DIR"""
import ipaddress, json, struct, sys, time

V4 = [
    ("1.2.3.0", "1.2.3.255", "中国|0|湖南省|长沙市|电信"),
    ("1.2.4.0", "1.2.5.255", "中国|0|广西壮族自治区|南宁市|联通"),
    ("1.3.0.0", "1.4.255.255", "中国|0|北京|北京市|0"),
    ("8.8.8.0", "8.8.8.255", "美国|0|0|0|Level3"),
    ("41.0.0.0", "41.0.255.255", "Kenya|0|Nairobi|Nairobi|0"),
    ("192.168.0.0", "192.168.255.255", "0|0|0|内网IP|内网IP"),
]
V6 = [
    ("2400:da00::", "2400:da00:ffff:ffff:ffff:ffff:ffff:ffff", "中国|北京市|北京市|电信|CN"),
    ("2a00:1450::", "2a00:1450:ffff:ffff:ffff:ffff:ffff:ffff", "Ireland|Dublin|Dublin|Google|IE"),
]
PROBES_V4 = ["1.2.3.4", "1.2.3.0", "1.2.3.255", "1.2.4.1", "1.2.5.200", "1.3.0.0", "1.4.255.255", "1.4.128.9", "8.8.8.8",
             "41.0.1.2", "192.168.1.1", "1.2.2.255", "1.5.0.0", "9.9.9.9", "255.255.255.255", "0.0.0.0"]
PROBES_V6 = ["2400:da00::1", "2400:da00:ffff::", "2a00:1450:4001::200e", "2400:db00::1", "::1"]


def write(path, version, width, ranges):
    segments = []
    for start, end, region in ranges:
        s, e = int(ipaddress.ip_address(start)), int(ipaddress.ip_address(end))
        # A segment never crosses its first two bytes' slot of the vector index (the maker's split).
        shift = 8 * (width - 2)
        while s <= e:
            slot_end = ((s >> shift) << shift) | ((1 << shift) - 1)
            segments.append((s, min(e, slot_end), region))
            s = min(e, slot_end) + 1
    segments.sort()
    header = bytearray(256)
    regions = bytearray()
    offsets = {}
    data_start = 256 + 256 * 256 * 8
    for _, _, region in segments:
        if region not in offsets:
            offsets[region] = data_start + len(regions)
            regions += region.encode()
    size = 2 * width + 6
    index_start = data_start + len(regions)
    blocks = bytearray()
    vector = [[0, 0] for _ in range(256 * 256)]
    for n, (s, e, region) in enumerate(segments):
        raw = region.encode()
        if width == 4:
            blocks += struct.pack("<IIHI", s, e, len(raw), offsets[region])
        else:
            blocks += s.to_bytes(16, "big") + e.to_bytes(16, "big") + struct.pack("<HI", len(raw), offsets[region])
        ptr = index_start + n * size
        slot = s >> (8 * (width - 2))
        if vector[slot][0] == 0:
            vector[slot][0] = ptr
        vector[slot][1] = ptr
    end_ptr = index_start + (len(segments) - 1) * size
    struct.pack_into("<HHIII", header, 0, version, 1, int(time.time()), index_start, end_ptr)
    if version == 3:
        struct.pack_into("<HH", header, 16, 6 if width == 16 else 4, 4)
    with open(path, "wb") as out:
        out.write(header)
        out.write(b"".join(struct.pack("<II", a, b) for a, b in vector))
        out.write(regions)
        out.write(blocks)


def main():
    out = sys.argv[1]
    write(out + "/v4.xdb", 2, 4, V4)
    write(out + "/v6.xdb", 3, 16, V6)
    from ip2region import searcher, util
    answers = {}
    for name, probes, version in (("v4.xdb", PROBES_V4, util.IPv4), ("v6.xdb", PROBES_V6, util.IPv6)):
        with open(out + "/" + name, "rb") as f:
            buffer = f.read()
        s = searcher.new_with_buffer(version, buffer)
        answers[name] = {ip: s.search(ip) for ip in probes}
    with open(out + "/xdb-answers.json", "w") as f:
        json.dump(answers, f, ensure_ascii=False, indent=1)


main()
