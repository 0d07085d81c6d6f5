import BenchSupport
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import DatongRuntime

/// HTTP as RFC 9110 and 9112 say every server speaks it, on all four services.
@Suite("HTTP rules every service keeps")
struct HTTPRulesTests {
    static func raw(_ port: Int, _ head: String) async throws -> HTTPLoad.Answer {
        try await HTTPLoad.onThread {
            let connection = try HTTPLoad.Connection(port: port, receiveTimeout: 10)
            defer { connection.close() }
            return try connection.exchange(Array((head + "\r\n").utf8))
        }
    }

    @Test("HEAD /health is answered as GET is, without a body; a request needs one valid Host")
    func headAndHost() async throws {
        try await RunningServices.run { services in
            let clients: [(String, any TestClientProtocol)] = [
                ("gateway", services.gateway), ("identity", services.identity), ("config", services.config), ("collector", services.collector),
            ]
            for (name, client) in clients {
                let head = try await client.execute(uri: "/health", method: .head)
                #expect(head.status == .ok, "\(name)")
                #expect(head.body.readableBytes == 0, "\(name)")
                let port = client.port!
                let valid = ["Host: example.com", "Host: sa.example.com:8106", "Host: [::1]:8106", "Host: 127.0.0.1", "Host:"]
                for host in valid {
                    let answer = try await Self.raw(port, "GET /health HTTP/1.1\r\n\(host)\r\n")
                    #expect(answer.status == 200, "\(name) \(host): \(answer.status)")
                }
                let invalid = ["", "Host: a\r\nHost: b", "Host: a b@c/d", "Host: a:b", "Host: [zz]", "Host: a:123456"]
                for host in invalid {
                    let answer = try await Self.raw(port, "GET /health HTTP/1.1\r\n" + (host.isEmpty ? "" : "\(host)\r\n"))
                    #expect(answer.status == 400, "\(name) \(host.debugDescription): \(answer.status)")
                }
            }
        }
    }

    @Test("the Host rule, case by case")
    func hostRule() {
        for host in ["example.com", "a-b.c_d~e", "x.test:1", "10.0.0.1:65535", "[2001:db8::1]", "[::1]:80", "", "%41"] {
            #expect(HostHeaderMiddleware.isValid(host), "\(host)")
        }
        for host in ["a b", "a@b", "a/b", "a:b", "[::1", "[]", "[g::1]", "a:1234567", "a?b", "a#b"] {
            #expect(!HostHeaderMiddleware.isValid(host), "\(host)")
        }
    }
}
