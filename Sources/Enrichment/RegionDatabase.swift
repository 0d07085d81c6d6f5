import CMaxMindDB
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Where an address is, as Sensors stores it in `$country`, `$province` and `$city`: the
/// database's Chinese names in their short form (中国, 湖南, 长沙), English where it has no Chinese;
/// nil for what the database does not know (never a placeholder such as 未知).
public struct Region: Sendable, Equatable {
    public var country: String?
    public var province: String?
    public var city: String?

    public init(country: String? = nil, province: String? = nil, city: String? = nil) {
        self.country = Self.known(country)
        self.province = Self.known(province).map(Self.shortProvince)
        self.city = Self.known(city).map(Self.shortCity)
    }

    public var isEmpty: Bool { country == nil && province == nil && city == nil }

    /// Placeholders databases write for "unknown": ip2region's `0`, and the like. Names are compared
    /// as written: databases do not pad them.
    private static let placeholders: Set<String> = ["", "0", "-", "未知", "保留"]

    private static func known(_ name: String?) -> String? {
        guard let name, !placeholders.contains(name) else { return nil }
        return name
    }

    /// The autonomous regions' and special administrative regions' short names.
    private static let provinceNames: [String: String] = [
        "内蒙古自治区": "内蒙古", "广西壮族自治区": "广西", "西藏自治区": "西藏", "宁夏回族自治区": "宁夏", "新疆维吾尔自治区": "新疆",
        "香港特别行政区": "香港", "澳门特别行政区": "澳门",
    ]

    /// 省 and 市 in UTF-8: a suffix is dropped as its three bytes.
    private static let provinceSuffix: [UInt8] = Array("省".utf8)
    private static let citySuffix: [UInt8] = Array("市".utf8)

    /// 湖南省 → 湖南, 北京市 → 北京: Sensors' short form of a Chinese province.
    static func shortProvince(_ name: String) -> String {
        if let short = provinceNames[name] { return short }
        return dropping(provinceSuffix, from: name) ?? dropping(citySuffix, from: name) ?? name
    }

    /// 长沙市 → 长沙; other names (自治州, 地区, English) as they are.
    static func shortCity(_ name: String) -> String {
        dropping(citySuffix, from: name) ?? name
    }

    /// `name` without `suffix` when it ends with it and keeps more than one character before it.
    private static func dropping(_ suffix: [UInt8], from name: String) -> String? {
        let bytes = name.utf8
        // More than the suffix and one more CJK character (3 bytes): 市 alone stays 市.
        guard bytes.count >= suffix.count + 6, bytes.suffix(suffix.count).elementsEqual(suffix) else { return nil }
        return String(decoding: bytes.dropLast(suffix.count), as: UTF8.self)
    }
}

/// An IP database opened for lookups: a MaxMind DB (`.mmdb`) or an ip2region `.xdb` file.
public protocol RegionLookup: Sendable {
    func region(of address: IPAddress) -> Region?
}

public enum RegionDatabase {
    public struct Unreadable: Error, CustomStringConvertible {
        public let description: String
    }

    /// Opens `path`: an ip2region file by its `.xdb` name, any other as a MaxMind DB, which
    /// libmaxminddb checks (its metadata marker, its search tree).
    public static func open(_ path: String) throws -> any RegionLookup {
        path.hasSuffix(".xdb") ? try XDBDatabase(path: path) : try MaxMindDatabase(path: path)
    }
}

/// A MaxMind DB file read with libmaxminddb (memory-mapped; lookups are read-only and may run on
/// any thread). GeoIP2/GeoLite2 City and Country, DB-IP Lite and IPinfo's files: names from
/// `country`/`subdivisions`/`city` `names` maps (zh-CN first, then en), or the flat
/// `country_name`/`region`/`city` strings some vendors write.
public final class MaxMindDatabase: RegionLookup, @unchecked Sendable {
    // The MMDB_s is written once by MMDB_open and only read afterwards.
    private let mmdb: UnsafeMutablePointer<MMDB_s>

    public init(path: String) throws {
        // Stored only once open: a throwing initializer of a class runs `deinit` once its
        // properties are set, which would close what never opened.
        let opened = UnsafeMutablePointer<MMDB_s>.allocate(capacity: 1)
        let status = MMDB_open(path, UInt32(MMDB_MODE_MMAP), opened)
        guard status == MMDB_SUCCESS else {
            opened.deallocate()
            throw RegionDatabase.Unreadable(description: "\(path) is not a MaxMind DB: \(String(cString: MMDB_strerror(status)))")
        }
        mmdb = opened
    }

    deinit {
        MMDB_close(mmdb)
        mmdb.deallocate()
    }

    /// The database's type as its metadata names it (`GeoLite2-City`, `DBIP-City-Lite`, …).
    public var databaseType: String { String(cString: mmdb.pointee.metadata.database_type) }

    public func region(of address: IPAddress) -> Region? {
        var error: Int32 = 0
        func lookup<Socket>(_ socket: Socket) -> MMDB_lookup_result_s {
            withUnsafePointer(to: socket) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { MMDB_lookup_sockaddr(mmdb, $0, &error) } }
        }
        let result: MMDB_lookup_result_s
        switch address {
        case .v4:
            var socket = sockaddr_in()
            socket.sin_family = sa_family_t(AF_INET)
            withUnsafeMutableBytes(of: &socket.sin_addr) { $0.copyBytes(from: address.bytes) }
            result = lookup(socket)
        case .v6:
            // An IPv4-only database has no answer for an IPv6 address (libmaxminddb says so).
            var socket = sockaddr_in6()
            socket.sin6_family = sa_family_t(AF_INET6)
            withUnsafeMutableBytes(of: &socket.sin6_addr) { $0.copyBytes(from: address.bytes) }
            result = lookup(socket)
        }
        guard error == MMDB_SUCCESS, result.found_entry else { return nil }
        var entry = result.entry
        let paths = MMDBPath.all
        let region = Region(
            country: string(&entry, paths.countryZH) ?? string(&entry, paths.countryEN) ?? string(&entry, paths.countryName)
                ?? string(&entry, paths.countryFlat),
            province: string(&entry, paths.provinceZH) ?? string(&entry, paths.provinceEN) ?? string(&entry, paths.regionFlat),
            city: string(&entry, paths.cityZH) ?? string(&entry, paths.cityEN) ?? string(&entry, paths.cityFlat)
        )
        return region.isEmpty ? nil : region
    }

    /// The UTF-8 string at `path` under `entry`, or nil when there is none there.
    private func string(_ entry: inout MMDB_entry_s, _ path: MMDBPath) -> String? {
        var data = MMDB_entry_data_s()
        let status = MMDB_aget_value(&entry, &data, path.pointers)
        guard status == MMDB_SUCCESS, data.has_data, data.type == UInt32(MMDB_DATA_TYPE_UTF8_STRING), let text = data.utf8_string else {
            return nil
        }
        let bytes = UnsafeRawBufferPointer(start: text, count: Int(data.data_size))
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A path into a MaxMind DB record as libmaxminddb takes one: C strings ending in a null pointer,
/// made once for the process (a lookup then allocates nothing for its paths).
struct MMDBPath: @unchecked Sendable {
    // Allocated once and never freed or written: the paths live as long as the process.
    let pointers: UnsafePointer<UnsafePointer<CChar>?>

    init(_ components: [String]) {
        let list = UnsafeMutablePointer<UnsafePointer<CChar>?>.allocate(capacity: components.count + 1)
        for (index, component) in components.enumerated() { list[index] = UnsafePointer(strdup(component)) }
        list[components.count] = nil
        pointers = UnsafePointer(list)
    }

    struct Paths: Sendable {
        let countryZH = MMDBPath(["country", "names", "zh-CN"])
        let countryEN = MMDBPath(["country", "names", "en"])
        let countryName = MMDBPath(["country_name"])
        let countryFlat = MMDBPath(["country"])
        let provinceZH = MMDBPath(["subdivisions", "0", "names", "zh-CN"])
        let provinceEN = MMDBPath(["subdivisions", "0", "names", "en"])
        let regionFlat = MMDBPath(["region"])
        let cityZH = MMDBPath(["city", "names", "zh-CN"])
        let cityEN = MMDBPath(["city", "names", "en"])
        let cityFlat = MMDBPath(["city"])
    }

    static let all = Paths()
}

/// An ip2region `.xdb` file (its format 2.0, IPv4; and 3.0, IPv4 or IPv6), read whole into memory
/// and searched as the format's own searchers do: a 256×256 vector index on the address's first two
/// bytes, then a binary search of that slice's segments. A region is `国家|区域|省份|城市|ISP` (the
/// 2.0 data) or `国家|省份|城市|ISP|国家代码` (the 3.0 data, told by its two-letter last field).
public final class XDBDatabase: RegionLookup, Sendable {
    private let bytes: [UInt8]
    /// 4 or 16: the addresses the file holds.
    public let addressBytes: Int
    private let segmentSize: Int

    static let headerLength = 256
    static let vectorIndexLength = 256 * 256 * 8
    /// A file larger than this is not an xdb file (the full IPv6 data is under 100 MB).
    static let maxFileBytes = 1 << 30

    public convenience init(path: String) throws {
        let attributes = try? FileManager.default.attributesOfItem(atPath: path)
        guard let size = (attributes?[.size] as? NSNumber)?.intValue, size <= Self.maxFileBytes,
            let data = FileManager.default.contents(atPath: path)
        else {
            throw RegionDatabase.Unreadable(description: "cannot read \(path), or it is over \(Self.maxFileBytes >> 20) MB")
        }
        try self.init(bytes: [UInt8](data), name: path)
    }

    public init(bytes: [UInt8], name: String = "the xdb file") throws {
        guard bytes.count >= Self.headerLength + Self.vectorIndexLength else {
            throw RegionDatabase.Unreadable(description: "\(name) is shorter than an xdb header and vector index")
        }
        let version = Int(bytes[0]) | Int(bytes[1]) << 8
        switch version {
        case 2: addressBytes = 4
        case 3:
            let ipVersion = Int(bytes[16]) | Int(bytes[17]) << 8
            guard ipVersion == 4 || ipVersion == 6 else {
                throw RegionDatabase.Unreadable(description: "\(name) is an xdb 3.0 file of IP version \(ipVersion)")
            }
            addressBytes = ipVersion == 4 ? 4 : 16
        default:
            throw RegionDatabase.Unreadable(description: "\(name) is not an xdb file of version 2 or 3 (it says \(version))")
        }
        segmentSize = addressBytes * 2 + 6
        self.bytes = bytes
    }

    private func uint32(_ offset: Int) -> Int? {
        guard offset >= 0, offset + 4 <= bytes.count else { return nil }
        return Int(bytes[offset]) | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2]) << 16 | Int(bytes[offset + 3]) << 24
    }

    public func region(of address: IPAddress) -> Region? {
        regionText(of: address).flatMap(Self.region)
    }

    /// The region text the file holds for `address`, as ip2region's own searchers return it.
    public func regionText(of address: IPAddress) -> String? {
        let ip = address.bytes
        guard ip.count == addressBytes else { return nil }
        let vector = Self.headerLength + (Int(ip[0]) * 256 + Int(ip[1])) * 8
        guard let start = uint32(vector), let end = uint32(vector + 4), start != 0, end >= start else { return nil }
        var low = 0
        var high = (end - start) / segmentSize
        while low <= high {
            let middle = (low + high) >> 1
            let segment = start + middle * segmentSize
            guard segment + segmentSize <= bytes.count else { return nil }
            if compare(ip, at: segment) < 0 {
                high = middle - 1
            } else if compare(ip, at: segment + addressBytes) > 0 {
                low = middle + 1
            } else {
                let lengthAt = segment + 2 * addressBytes
                let length = Int(bytes[lengthAt]) | Int(bytes[lengthAt + 1]) << 8
                guard let pointer = uint32(lengthAt + 2), length > 0, pointer + length <= bytes.count else { return nil }
                return String(decoding: bytes[pointer..<pointer + length], as: UTF8.self)
            }
        }
        return nil
    }

    /// Compares `ip` (network order) with the address stored at `offset`: IPv4 ones are stored
    /// little-endian, IPv6 ones in network order.
    private func compare(_ ip: [UInt8], at offset: Int) -> Int {
        for index in 0..<addressBytes {
            let stored = addressBytes == 4 ? bytes[offset + 3 - index] : bytes[offset + index]
            if ip[index] != stored { return ip[index] < stored ? -1 : 1 }
        }
        return 0
    }

    static func region(_ text: String) -> Region? {
        let fields = text.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
        guard fields.count >= 4 else { return nil }
        let isNewLayout = fields.count >= 5 && fields[4].utf8.count == 2 && fields[4].utf8.allSatisfy { (65...90).contains($0) }
        let region =
            isNewLayout
            ? Region(country: fields[0], province: fields[1], city: fields[2])
            : Region(country: fields[0], province: fields[2], city: fields[3])
        return region.isEmpty ? nil : region
    }
}
