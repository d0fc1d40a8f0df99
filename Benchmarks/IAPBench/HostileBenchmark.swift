import ArgumentParser
import Foundation
import JSONRPC
import RPCTransport

/// Hostile wire input against running services, with each service's peak RSS sampled from /proc and a
/// well-behaved client's ping latency measured throughout (the long version of HostileWireTests, against
/// the real executables).
struct HostileBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hostile",
        abstract: "Abuse every service over TCP; report peak RSS and well-behaved latency.")
    @Option(help: "Comma-separated HOST:PORT of the services to abuse.")
    var addrs = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103,127.0.0.1:7104,127.0.0.1:7105"
    @Option(help: "Idle connections held open per service.") var idle = 2_000
    @Option(help: "Connections that send half a request and never finish it, per service.") var slowLoris = 200
    @Option(help: "Rounds of the whole abuse per service.") var rounds = 3

    /// A blocking TCP socket with a receive timeout.
    final class Socket {
        let fd: Int32
        init?(host: String, port: Int) {
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = in_port_t(UInt16(port).bigEndian)
            addr.sin_addr.s_addr = inet_addr(host)
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let ok = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            if ok != 0 { close(fd); return nil }
        }
        deinit { close(fd) }

        func send(_ bytes: [UInt8]) {
            var sent = 0
            while sent < bytes.count {
                let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n <= 0 { return }
                sent += n
            }
        }

        /// One reply line (or nil on close/timeout).
        func line() -> String? {
            var out: [UInt8] = []
            var byte: UInt8 = 0
            while recv(fd, &byte, 1, 0) == 1 {
                if byte == 0x0A { return String(decoding: out, as: UTF8.self) }
                out.append(byte)
            }
            return out.isEmpty ? nil : String(decoding: out, as: UTF8.self)
        }
    }

    func run() async throws {
        let names = ["accounts-service", "catalog-service", "verification-service", "fulfillment-service", "appstore-sim"]
        let before = RSSSampler.current(names: names)
        let sampler = RSSSampler(names: names)
        sampler.start()
        var rng = SystemRandomNumberGenerator()
        for addr in addrs.split(separator: ",").map(String.init) {
            let (host, port) = try RPCClient.parseAddress(addr)
            let good = try RPCClient(address: addr, configuration: .init(connections: 1, callTimeout: .seconds(5)))
            var latencies: [Double] = []
            var unexpected = 0
            func ping() async {
                let t0 = Date()
                if (try? await good.call(RPCPing.self, EmptyParams())) == "pong" {
                    latencies.append(Date().timeIntervalSince(t0) * 1000)
                } else {
                    unexpected += 1
                }
            }
            for _ in 0..<rounds {
                guard let s = Socket(host: host, port: port) else { throw ValidationError("cannot connect to \(addr)") }
                let cases: [[UInt8]] = [
                    (0..<4096).map { _ in UInt8.random(in: 0...255, using: &rng) }.filter { $0 != 0x0A } + [0x0A],
                    Array(#"{"jsonrpc":"2.0","method":"rpc.ping","id":""#.utf8) + [0xC0, 0xAF] + Array("\"}\n".utf8),
                    Array((String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "\n").utf8),
                    Array((#"{"jsonrpc":"2.0","method":"rpc.ping","id":1e999999}"# + "\n").utf8),
                    Array((#"{"jsonrpc":"2.0","method":"rpc.ping","method":"x","id":2}"# + "\n").utf8),
                    Array(
                        ("[" + Array(repeating: #"{"jsonrpc":"2.0","method":"rpc.ping","id":3}"#, count: 10_000).joined(separator: ",") + "]\n").utf8),
                ]
                for bytes in cases {
                    s.send(bytes)
                    if s.line()?.contains("\"error\"") != true { unexpected += 1 }
                    await ping()
                }
                if let long = Socket(host: host, port: port) {
                    long.send([UInt8](repeating: UInt8(ascii: "a"), count: 5 * 1024 * 1024))
                    if long.line()?.contains("-32600") != true { unexpected += 1 }
                }
                var held: [Socket] = []
                for i in 0..<(idle + slowLoris) {
                    guard let c = Socket(host: host, port: port) else { break }
                    if i < slowLoris { c.send(Array(#"{"jsonrpc":"2.0","method":"rpc.pi"#.utf8)) }
                    held.append(c)
                    if i % 200 == 0 { await ping() }
                }
                for _ in 0..<100 { await ping() }
                held.removeAll()
                await ping()
            }
            await good.close()
            latencies.sort()
            let p99 = latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * 0.99))]
            print(
                String(
                    format: "%-16@ pings %4d  p50 %.2f ms  p99 %.2f ms  max %.2f ms  unexpected answers %d",
                    addr as NSString, latencies.count, latencies.isEmpty ? 0 : latencies[latencies.count / 2], p99,
                    latencies.last ?? 0, unexpected))
        }
        sampler.stop()
        let peaks = sampler.peaksMiB()
        for name in names {
            print(String(format: "%-22@ RSS before %.1f MiB, peak %.1f MiB", name as NSString, Double(before[name] ?? 0) / 1024, peaks[name] ?? 0))
        }
    }
}
