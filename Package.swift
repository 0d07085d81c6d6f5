// swift-tools-version:6.1
import Foundation
import PackageDescription

let package = Package(
    name: "datong",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "bridge-gateway", targets: ["RunGateway"]),
        .executable(name: "identity-service", targets: ["RunIdentity"]),
        .executable(name: "config-service", targets: ["RunConfig"]),
        .executable(name: "collector", targets: ["RunCollector"]),
        .executable(name: "gateway-bench", targets: ["GatewayBench"]),
        .executable(name: "collector-bench", targets: ["CollectorBench"]),
        .executable(name: "config-bench", targets: ["ConfigBench"]),
        .executable(name: "identity-bench", targets: ["IdentityBench"]),
        .executable(name: "e2e-bench", targets: ["E2EBench"]),
        .executable(name: "failure-drills", targets: ["FailureDrills"]),
        .executable(name: "datongctl", targets: ["RunDatongctl"]),
        .executable(name: "datong-fuzz", targets: ["Fuzz"]),
    ],
    // Exact versions, as tested (and `indirectDependencies` below for the image).
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", exact: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client.git", exact: "1.37.0"),
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", exact: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", exact: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio.git", exact: "2.101.3"),
        .package(url: "https://github.com/adam-fowler/compress-nio.git", exact: "1.5.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", exact: "1.8.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams.git", exact: "6.2.2"),
    ],
    targets: [
        // C libraries, through pkg-config.
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "CMaxMindDB", pkgConfig: "libmaxminddb", providers: [.apt(["libmaxminddb-dev"])]),
        // libFuzzer's driver entry, declared only; the toolchain links it into fuzz builds.
        .systemLibrary(name: "CLibFuzzer", path: "Tools/CLibFuzzer"),

        // PostgreSQL over libpq: pool on dedicated threads, statements, transactions, COPY, migrations.
        .target(
            name: "DatongPostgres",
            dependencies: [
                "CLibPQ",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // OpenSSL libcrypto for the SDKs' payload encryption: key pairs, sealing at rest, unwrapping
        // envelope keys (RSA PKCS#1 v1.5, ECIES) and AES payloads.
        .target(name: "DatongCrypto", dependencies: ["CCrypto"]),
        // JSON for untrusted bytes and the hot paths: a checking tape parser and a writer.
        .target(name: "DatongJSON"),
        // Inter-service contracts: the types both sides of a call use, each with its one wire codec.
        .target(name: "DatongContracts", dependencies: ["DatongJSON"]),
        // What every service shares: settings, logging, metrics, health/ready, request ids, errors.
        .target(
            name: "DatongRuntime",
            dependencies: [
                "DatongContracts", "DatongCrypto", "CCrypto",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOFoundationEssentialsCompat", package: "swift-nio"),
            ]
        ),

        // The database of the three services that have one (the gateway has none and does not link
        // libpq): the pool as a service, migrations before start, database errors as answers.
        .target(
            name: "DatongStorage",
            dependencies: [
                "DatongPostgres", "DatongRuntime",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),

        // What the gateway and identity-service both know of identities: which ones a record names
        // (IdentityRules, docs/PROTOCOL.md section 4) and the cache of their owners with its
        // freshness rules (IdentityCache).
        .target(
            name: "IdentityCore",
            dependencies: [
                "DatongContracts",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),

        // What the server knows of a record's sender (docs/ANALYTICS.md, "Enrichment"): the client's
        // address behind trusted proxies, its region from an IP database (MaxMind DB through
        // libmaxminddb, ip2region's xdb), its browser, OS and device from the User-Agent (uap-core).
        .target(
            name: "Enrichment",
            dependencies: ["CMaxMindDB", .product(name: "Yams", package: "Yams")]
        ),

        // The four services, one library each.
        .target(
            name: "Gateway",
            dependencies: [
                "DatongJSON", "DatongContracts", "DatongRuntime", "DatongCrypto", "IdentityCore", "Enrichment", "CZlib",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOFoundationEssentialsCompat", package: "swift-nio"),
            ]
        ),
        .target(
            name: "Identity",
            dependencies: [
                "DatongJSON", "DatongContracts", "DatongRuntime", "DatongPostgres", "DatongStorage", "IdentityCore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationEssentialsCompat", package: "swift-nio"),
            ]
        ),
        .target(
            name: "ConfigService",
            dependencies: [
                "DatongJSON", "DatongContracts", "DatongRuntime", "DatongPostgres", "DatongStorage", "DatongCrypto",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationEssentialsCompat", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            resources: [.copy("Console")]
        ),
        .target(
            name: "Collector",
            dependencies: [
                "DatongJSON", "DatongContracts", "DatongRuntime", "DatongPostgres", "DatongStorage",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),

        // Thin executables: read settings, bootstrap logging and metrics, run.
        .executableTarget(name: "RunGateway", dependencies: ["Gateway", "DatongRuntime"]),
        .executableTarget(name: "RunIdentity", dependencies: ["Identity", "DatongRuntime"]),
        .executableTarget(name: "RunConfig", dependencies: ["ConfigService", "DatongRuntime"]),
        .executableTarget(name: "RunCollector", dependencies: ["Collector", "DatongRuntime"]),

        // The admin command line: config-service documents from files, versions, diffs, rollbacks.
        .target(
            name: "DatongCtl",
            dependencies: [
                "DatongJSON", "DatongContracts", "CZlib",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .executableTarget(name: "RunDatongctl", dependencies: ["DatongCtl"]),

        // The tooling, apart from the product (docs/ARCHITECTURE.md): benchmarks that print figures
        // measured on this machine (docs/BENCHMARKS.md) in Benchmarks/, drills and fuzzing in Tools/.
        .target(
            name: "BenchSupport",
            dependencies: [
                "DatongPostgres", "DatongCrypto", "CCrypto",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Benchmarks/BenchSupport"
        ),
        // The gateway's decode path entered without HTTP or storage, for gateway-bench and the fuzzer.
        .target(
            name: "GatewayHarness",
            dependencies: ["Gateway", "DatongJSON", "DatongContracts", "DatongCrypto", "DatongRuntime", "Enrichment"],
            path: "Tools/GatewayHarness"
        ),
        .executableTarget(
            name: "GatewayBench",
            dependencies: [
                "GatewayHarness", "Gateway", "Collector", "BenchSupport", "DatongCrypto", "DatongContracts", "Enrichment",
                .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Benchmarks/GatewayBench"
        ),
        // The four services as separate processes (release builds), driven like SDKs drive them.
        .executableTarget(name: "E2EBench", dependencies: ["BenchSupport", "Collector", "DatongPostgres"], path: "Benchmarks/E2EBench"),
        // Kills and restarts each service and PostgreSQL under SDK-like load, then overloads the gateway.
        .executableTarget(
            name: "FailureDrills", dependencies: ["BenchSupport", "DatongPostgres", .product(name: "Logging", package: "swift-log")],
            path: "Tools/FailureDrills"),
        .executableTarget(
            name: "CollectorBench",
            dependencies: [
                "BenchSupport", "Collector", "DatongContracts", "DatongPostgres", "DatongRuntime",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/CollectorBench"
        ),
        .executableTarget(
            name: "IdentityBench",
            dependencies: [
                "BenchSupport", "Identity", "IdentityCore", "DatongContracts", "DatongPostgres", "DatongRuntime",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            path: "Benchmarks/IdentityBench"
        ),
        .executableTarget(
            name: "ConfigBench",
            dependencies: [
                "BenchSupport", "ConfigService", "DatongPostgres", "DatongRuntime",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/ConfigBench"
        ),

        // libFuzzer targets for every parser of untrusted bytes (scripts/fuzz, docs/RELIABILITY.md).
        .executableTarget(
            name: "Fuzz",
            dependencies: [
                "GatewayHarness", "Gateway", "Collector", "DatongJSON", "DatongContracts", "DatongCrypto", "IdentityCore", "Enrichment", "CLibFuzzer",
            ],
            path: "Tools/Fuzz"
        ),

        // What both test targets share: the SDK captures and samples made from them (no database).
        .target(
            name: "DatongTestSupport", dependencies: ["DatongContracts", "DatongJSON", "Collector", "Enrichment", .product(name: "Yams", package: "Yams")],
            path: "Tests/DatongTestSupport"),
        // Pure tests: no PostgreSQL, no services; `swift test` runs them anywhere.
        .testTarget(
            name: "DatongUnitTests",
            dependencies: [
                "Gateway", "Identity", "ConfigService", "Collector", "Enrichment", "DatongJSON", "DatongContracts", "DatongRuntime",
                "IdentityCore", "DatongTestSupport",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ]
        ),
        // The services on a real PostgreSQL (`scripts/test` starts one); without it each test is
        // cancelled, saying what it needs.
        .testTarget(
            name: "DatongTests",
            dependencies: [
                "Gateway", "Identity", "ConfigService", "Collector", "DatongCtl", "Enrichment",
                "DatongJSON", "DatongContracts", "DatongRuntime", "DatongPostgres", "DatongStorage", "DatongCrypto", "BenchSupport", "IdentityCore",
                "DatongTestSupport",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOFoundationEssentialsCompat", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

// Every target of ours is built with the language's upcoming rules: `any` spelled out for
// existentials, and members visible only from modules a file imports. CI sets
// DATONG_WARNINGS_AS_ERRORS=1 (scripts/test does when CI is set): a warning fails the build there.
let warningsAsErrors = ProcessInfo.processInfo.environment["DATONG_WARNINGS_AS_ERRORS"] == "1"

for target in package.targets where target.type != .system {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    settings.append(.enableUpcomingFeature("MemberImportVisibility"))
    if warningsAsErrors { settings.append(.unsafeFlags(["-warnings-as-errors"])) }
    target.swiftSettings = settings
}

// The packages ours reach through those above, at the versions tested with them. The image build
// (deploy/Dockerfile) sets DATONG_EXACT_DEPENDENCIES=1 so that an image built anywhere, on any day,
// compiles what CI compiled: a Package.resolved cannot fix them, since its commits would be those of
// the package copies CI builds from, not GitHub's. Elsewhere they stay out of the manifest, where
// SwiftPM would warn on every build that no target uses them; scripts/check-contracts checks that
// they are what a plain resolve picks.
let indirectDependencies: [Package.Dependency] = [
    .package(url: "https://github.com/apple/swift-algorithms.git", exact: "1.2.1"),
    .package(url: "https://github.com/apple/swift-asn1.git", exact: "1.7.4"),
    .package(url: "https://github.com/apple/swift-async-algorithms.git", exact: "1.1.4"),
    .package(url: "https://github.com/apple/swift-atomics.git", exact: "1.3.0"),
    .package(url: "https://github.com/apple/swift-certificates.git", exact: "1.21.1"),
    .package(url: "https://github.com/apple/swift-collections.git", exact: "1.6.0"),
    .package(url: "https://github.com/apple/swift-configuration.git", exact: "1.4.0"),
    .package(url: "https://github.com/apple/swift-crypto.git", exact: "4.5.2"),
    .package(url: "https://github.com/apple/swift-distributed-tracing.git", exact: "1.7.3"),
    .package(url: "https://github.com/apple/swift-http-structured-headers.git", exact: "1.7.0"),
    .package(url: "https://github.com/apple/swift-nio-extras.git", exact: "1.35.2"),
    .package(url: "https://github.com/apple/swift-nio-http2.git", exact: "1.46.0"),
    .package(url: "https://github.com/apple/swift-nio-ssl.git", exact: "2.37.6"),
    .package(url: "https://github.com/apple/swift-nio-transport-services.git", exact: "1.28.0"),
    .package(url: "https://github.com/apple/swift-numerics.git", exact: "1.1.1"),
    .package(url: "https://github.com/apple/swift-service-context.git", exact: "1.5.1"),
    .package(url: "https://github.com/apple/swift-system", exact: "1.8.1"),
]
if ProcessInfo.processInfo.environment["DATONG_EXACT_DEPENDENCIES"] == "1" {
    package.dependencies += indirectDependencies
}
