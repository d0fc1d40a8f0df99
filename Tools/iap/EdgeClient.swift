import AsyncHTTPClient
import Foundation
import JSONRPC
import NIOCore
import NIOSSL

/// The suite seen from outside: JSON-RPC over HTTPS to the edge (`--edge URL`, `IAP_EDGE_URL`) for the
/// public methods, and content downloads from signed URLs. `--ca FILE` (`IAP_EDGE_CA`) trusts a private
/// certificate authority (compose/up.sh's localhost certificate) in addition to the system's.
struct EdgeClient {
    let base: String
    let client: HTTPClient

    init(base: String, caFile: String?) throws {
        self.base = base.hasSuffix("/") ? String(base.dropLast()) : base
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(caFile))]
        }
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        // HTTP/1.1: AsyncHTTPClient downloads large bodies over HTTP/2 at ~100 MiB/s from the edge (and ~470 from
        // nginx) against ~1,100 over HTTP/1.1 (Benchmarks/HISTORY.md, the edge); one call at a time needs no multiplexing.
        configuration.httpVersion = .http1Only
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    func shutdown() async {
        try? await client.shutdown()
    }

    enum Failure: Error {
        case unreachable(String)
        case http(Int, String)
    }

    /// One JSON-RPC call: the raw `result`, or the service's error.
    func callRaw(method: String, params: [UInt8], session: String?, timeoutSeconds: Int64) async throws -> Result<[UInt8], RPCError> {
        var request = HTTPClientRequest(url: base + "/v1/rpc")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        var body: [UInt8] = Array(#"{"jsonrpc":"2.0","id":1,"method":"#.utf8)
        body += try JSONByteEncoder.encode(JSONValue.string(method))
        body += Array(#","params":"#.utf8) + params + [UInt8(ascii: "}")]
        request.body = .bytes(ByteBuffer(bytes: body))
        if let session { request.headers.add(name: "Authorization", value: "Bearer \(session)") }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: .seconds(timeoutSeconds))
        } catch {
            throw Failure.unreachable("\(error)")
        }
        let bytes = Array(buffer: try await response.body.collect(upTo: 64 << 20))
        guard response.status == .ok else {
            let retry = response.headers.first(name: "Retry-After").map { " (retry after \($0) s)" } ?? ""
            throw Failure.http(Int(response.status.code), "HTTP \(response.status.code)\(retry)")
        }
        let answer = try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        if let error = answer["error"] {
            return .failure(try JSONDecoder().decode(RPCError.self, from: Data(try JSONByteEncoder.encode(error))))
        }
        return .success(try JSONByteEncoder.encode(answer["result"] ?? .null))
    }

    /// Apple's webhook, as Apple calls it: the HTTP status of `POST /v1/notifications/appstore`.
    func postNotification(_ signedPayload: String) async throws -> Int {
        var request = HTTPClientRequest(url: base + "/v1/notifications/appstore")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: try JSONByteEncoder.encode(JSONValue.object(["signedPayload": .string(signedPayload)]))))
        do {
            return Int(try await client.execute(request, timeout: .seconds(30)).status.code)
        } catch {
            throw Failure.unreachable("\(error)")
        }
    }

    /// `GET /readyz`: the HTTP status and the edge's report of its dependencies.
    func readiness() async throws -> (status: Int, report: String) {
        let response: HTTPClientResponse
        do {
            response = try await client.execute(HTTPClientRequest(url: base + "/readyz"), timeout: .seconds(10))
        } catch {
            throw Failure.unreachable("\(error)")
        }
        return (Int(response.status.code), String(buffer: try await response.body.collect(upTo: 1 << 16)))
    }

    /// What a resumable download got: the status, the entity tag, the full size, and whether the bytes
    /// continue the partial file (206) or replace it (200).
    struct Fetched {
        var status: Int
        var etag: String?
        var size: Int64?
    }

    /// GETs `url` (absolute, or a path under the edge), from `offset` with `If-Range: etag` when resuming,
    /// writing the body to `handle`: appended after a 206, from the start after a 200.
    func download(_ url: String, offset: Int64, etag: String?, to handle: FileHandle, progress: (Int64) -> Void) async throws -> Fetched {
        var request = HTTPClientRequest(url: url.hasPrefix("/") ? base + url : url)
        if offset > 0 {
            request.headers.add(name: "Range", value: "bytes=\(offset)-")
            if let etag { request.headers.add(name: "If-Range", value: etag) }
        }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: .hours(2))
        } catch {
            throw Failure.unreachable("\(error)")
        }
        let status = Int(response.status.code)
        let tag = response.headers.first(name: "ETag")
        var size: Int64?
        if let range = response.headers.first(name: "Content-Range"), let total = range.split(separator: "/").last {
            size = Int64(total)
        } else if status == 200 {
            size = response.headers.first(name: "Content-Length").flatMap { Int64($0) }
        }
        switch status {
        case 200:
            try handle.truncate(atOffset: 0)
        case 206:
            try handle.seek(toOffset: UInt64(offset))
        default:
            return Fetched(status: status, etag: tag, size: size)
        }
        var written: Int64 = status == 206 ? offset : 0
        for try await buffer in response.body {
            try buffer.withUnsafeReadableBytes { try handle.write(contentsOf: $0) }
            written += Int64(buffer.readableBytes)
            progress(written)
        }
        return Fetched(status: status, etag: tag, size: size)
    }
}
