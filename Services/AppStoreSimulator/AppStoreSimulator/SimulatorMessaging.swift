import Foundation
import GRDB
import Hummingbird
import IAPProtocol

/// Apple's Retention Messaging API (`/inApps/v1/messaging/...`), as Apple documents it: images and messages uploaded with
/// their review state (PENDING until `sim.reviewMessaging` approves or rejects them), default messages per product and
/// locale (only approved messages, with approved images), the realtime URL (https; Production only after a passed
/// performance test), and the performance test of the app's endpoint (Sandbox only). Per app (the token's `bid`) and
/// environment. Errors are Apple's codes; limits are Apple's (header 66, body 144, alt text 150, bullet points 5 of 66,
/// 2000 images, full-size images 3840 wide and 160-2160 high, PNG without transparency).
extension AppStoreServerAPIEndpoint {
    static let maxImages = 2_000

    func addMessagingRoutes(to router: Router<BasicRequestContext>, prefix: String, environment: SimEnvironment) {
        let base = "\(prefix)inApps/v1/messaging"
        router.put(RouterPath("\(base)/image/:id")) { request, context -> Response in
            let size = Self.query(request)["imageSize"]?.first
            return await self.respond(request, maxBodyBytes: 16 << 20) { bid, body in
                try self.uploadImage(context.parameters.get("id") ?? "", size: size, png: body, environment: environment, bid: bid)
                return nil
            }
        }
        router.delete(RouterPath("\(base)/image/:id")) { request, context -> Response in
            await self.respond(request) { bid, _ in
                try self.deleteImage(context.parameters.get("id") ?? "", environment: environment, bid: bid)
                return nil
            }
        }
        router.get(RouterPath("\(base)/image/list")) { request, _ -> Response in
            await self.respond(request) { bid in try self.imageList(environment: environment, bid: bid) }
        }
        router.put(RouterPath("\(base)/message/:id")) { request, context -> Response in
            await self.respond(request) { bid, body in
                try self.uploadMessage(context.parameters.get("id") ?? "", body: body, environment: environment, bid: bid)
                return nil
            }
        }
        router.delete(RouterPath("\(base)/message/:id")) { request, context -> Response in
            await self.respond(request) { bid, _ in
                try self.deleteMessage(context.parameters.get("id") ?? "", environment: environment, bid: bid)
                return nil
            }
        }
        router.get(RouterPath("\(base)/message/list")) { request, _ -> Response in
            await self.respond(request) { bid in try self.messageList(environment: environment, bid: bid) }
        }
        addDefaultMessageRoutes(to: router, base: base, environment: environment)
        addRealtimeRoutes(to: router, base: base, environment: environment)
    }

    private func addDefaultMessageRoutes(to router: Router<BasicRequestContext>, base: String, environment: SimEnvironment) {
        router.put(RouterPath("\(base)/default/:productId/:locale")) { request, context -> Response in
            await self.respond(request) { bid, body in
                try self.configureDefault(
                    productId: context.parameters.get("productId") ?? "", locale: context.parameters.get("locale") ?? "", body: body,
                    environment: environment, bid: bid)
                return nil
            }
        }
        router.get(RouterPath("\(base)/default/:productId/:locale")) { request, context -> Response in
            await self.respond(request) { bid in
                ["messageIdentifier": try self.defaultMessage(context, environment: environment, bid: bid, delete: false)]
            }
        }
        router.delete(RouterPath("\(base)/default/:productId/:locale")) { request, context -> Response in
            await self.respond(request) { bid, _ in
                _ = try self.defaultMessage(context, environment: environment, bid: bid, delete: true)
                return nil
            }
        }
    }

    // MARK: images

    static func identifier(_ text: String) throws -> String {
        guard text.utf8.count == 36, UUID(uuidString: text) != nil else { throw APIError.badRequest(4_000_000, "Invalid request.") }
        return text.lowercased()
    }

    static let imageNotFound = APIError(status: .notFound, code: 4_040_014, message: "Image not found.")
    static let messageNotFound = APIError(status: .notFound, code: 4_040_015, message: "Message not found.")
    static let invalidImage = APIError.badRequest(4_000_161, "Invalid image.")

    func uploadImage(_ id: String, size: String?, png: [UInt8], environment: SimEnvironment, bid: String) throws {
        let id = try Self.identifier(id)
        let size = size ?? "FULL_SIZE"
        guard ["FULL_SIZE", "BULLET_POINT"].contains(size) else { throw APIError.badRequest(4_000_216, "Invalid image size.") }
        guard let (width, height) = Self.opaquePNG(png) else { throw Self.invalidImage }
        if size == "FULL_SIZE", width != 3840 || !(160...2160).contains(height) { throw Self.invalidImage }
        try simulator.store.writer.write { db in
            let key: [any DatabaseValueConvertible] = [environment.rawValue, bid]
            if try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM simImage WHERE environment = ? AND bundleId = ?", arguments: .init(key))!
                >= Self.maxImages
            {
                throw APIError(status: .forbidden, code: 4_030_014, message: "Maximum number of images reached.")
            }
            guard try Self.image(id, environment: environment, bid: bid, db: db) == nil else {
                throw APIError(status: .conflict, code: 4_090_000, message: "Image already exists.")
            }
            try db.execute(
                sql: "INSERT INTO simImage (environment, bundleId, imageIdentifier, imageSize, state) VALUES (?, ?, ?, ?, 'PENDING')",
                arguments: [environment.rawValue, bid, id, size])
        }
    }

    /// Width and height of a PNG without transparency (no alpha channel, no `tRNS` chunk), else nil.
    static func opaquePNG(_ bytes: [UInt8]) -> (Int, Int)? {
        let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        guard bytes.count >= 33, Array(bytes[0..<8]) == signature, Array(bytes[12..<16]) == Array("IHDR".utf8) else { return nil }
        func int(_ at: Int) -> Int { bytes[at..<(at + 4)].reduce(0) { $0 << 8 | Int($1) } }
        let colorType = bytes[25]
        guard colorType != 4, colorType != 6 else { return nil }
        var at = 8
        while at + 8 <= bytes.count {
            let length = int(at), type = Array(bytes[(at + 4)..<(at + 8)])
            if type == Array("tRNS".utf8) { return nil }
            if type == Array("IEND".utf8) { return (int(16), int(20)) }
            at += 12 + length
        }
        return nil
    }

    static func image(_ id: String, environment: SimEnvironment, bid: String, db: Database) throws -> Row? {
        try Row.fetchOne(
            db, sql: "SELECT * FROM simImage WHERE environment = ? AND bundleId = ? AND imageIdentifier = ?",
            arguments: [environment.rawValue, bid, id])
    }

    func deleteImage(_ id: String, environment: SimEnvironment, bid: String) throws {
        let id = try Self.identifier(id)
        try simulator.store.writer.write { db in
            guard try Self.image(id, environment: environment, bid: bid, db: db) != nil else { throw Self.imageNotFound }
            let used =
                try Bool.fetchOne(
                    db, sql: "SELECT 1 FROM simMessageImage WHERE environment = ? AND bundleId = ? AND imageIdentifier = ? LIMIT 1",
                    arguments: [environment.rawValue, bid, id]) ?? false
            guard !used else { throw APIError(status: .forbidden, code: 4_030_019, message: "Image in use.") }
            try db.execute(
                sql: "DELETE FROM simImage WHERE environment = ? AND bundleId = ? AND imageIdentifier = ?",
                arguments: [environment.rawValue, bid, id])
        }
    }

    func imageList(environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let rows = try simulator.store.writer.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM simImage WHERE environment = ? AND bundleId = ? ORDER BY imageIdentifier",
                arguments: [environment.rawValue, bid])
        }
        return [
            "imageIdentifiers": rows.map {
                ["imageIdentifier": $0["imageIdentifier"] as String, "imageState": $0["state"] as String, "imageSize": $0["imageSize"] as String]
            }
        ]
    }

    // MARK: messages

    func uploadMessage(_ id: String, body: [UInt8], environment: SimEnvironment, bid: String) throws {
        let id = try Self.identifier(id)
        let object = try Self.object(body)
        guard let header = object["header"] as? String, let text = object["body"] as? String else {
            throw APIError.badRequest(4_000_000, "Invalid request.")
        }
        guard header.count <= 66 else { throw APIError.badRequest(4_000_162, "Header too long.") }
        guard text.count <= 144 else { throw APIError.badRequest(4_000_163, "Body too long.") }
        var images: [String] = []
        func image(_ value: Any?) throws -> String? {
            guard let value else { return nil }
            guard let image = value as? [String: Any], let imageId = image["imageIdentifier"] as? String, let alt = image["altText"] as? String
            else { throw APIError.badRequest(4_000_000, "Invalid request.") }
            guard alt.count <= 150 else { throw APIError.badRequest(4_000_175, "Alt text too long.") }
            let normalized = try Self.identifier(imageId)
            images.append(normalized)
            return normalized
        }
        let mainImage = try image(object["image"])
        if let position = object["headerPosition"] {
            guard let position = position as? String, ["ABOVE_BODY", "ABOVE_IMAGE"].contains(position) else {
                throw APIError.badRequest(4_000_000, "Invalid request.")
            }
            if position == "ABOVE_IMAGE", mainImage == nil {
                throw APIError.badRequest(4_000_224, "Header above image requires an image.")
            }
        }
        if let bullets = object["bulletPoints"] {
            guard let bullets = bullets as? [[String: Any]] else { throw APIError.badRequest(4_000_000, "Invalid request.") }
            guard bullets.count <= 5 else { throw APIError.badRequest(4_000_218, "Too many bullet points.") }
            for bullet in bullets {
                guard let text = bullet["text"] as? String else { throw APIError.badRequest(4_000_000, "Invalid request.") }
                guard text.count <= 66 else { throw APIError.badRequest(4_000_219, "Bullet point text too long.") }
                _ = try image(bullet)
            }
        }
        let definition = String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
        try simulator.store.writer.write { db in
            for imageId in images where try Self.image(imageId, environment: environment, bid: bid, db: db) == nil { throw Self.imageNotFound }
            guard try Self.message(id, environment: environment, bid: bid, db: db) == nil else {
                throw APIError(status: .conflict, code: 4_090_001, message: "Message already exists.")
            }
            try db.execute(
                sql: "INSERT INTO simMessage (environment, bundleId, messageIdentifier, definition, state) VALUES (?, ?, ?, ?, 'PENDING')",
                arguments: [environment.rawValue, bid, id, definition])
            for imageId in Set(images) {
                try db.execute(
                    sql: "INSERT INTO simMessageImage (environment, bundleId, messageIdentifier, imageIdentifier) VALUES (?, ?, ?, ?)",
                    arguments: [environment.rawValue, bid, id, imageId])
            }
        }
    }

    static func message(_ id: String, environment: SimEnvironment, bid: String, db: Database) throws -> Row? {
        try Row.fetchOne(
            db, sql: "SELECT * FROM simMessage WHERE environment = ? AND bundleId = ? AND messageIdentifier = ?",
            arguments: [environment.rawValue, bid, id])
    }

    func deleteMessage(_ id: String, environment: SimEnvironment, bid: String) throws {
        let id = try Self.identifier(id)
        try simulator.store.writer.write { db in
            guard try Self.message(id, environment: environment, bid: bid, db: db) != nil else { throw Self.messageNotFound }
            for table in ["simMessage", "simMessageImage"] {
                try db.execute(
                    sql: "DELETE FROM \(table) WHERE environment = ? AND bundleId = ? AND messageIdentifier = ?",
                    arguments: [environment.rawValue, bid, id])
            }
        }
    }

    func messageList(environment: SimEnvironment, bid: String) throws -> [String: Any] {
        let rows = try simulator.store.writer.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM simMessage WHERE environment = ? AND bundleId = ? ORDER BY messageIdentifier",
                arguments: [environment.rawValue, bid])
        }
        return ["messageIdentifiers": rows.map { ["messageIdentifier": $0["messageIdentifier"] as String, "messageState": $0["state"] as String] }]
    }

    // MARK: default messages

    func configureDefault(productId: String, locale: String, body: [UInt8], environment: SimEnvironment, bid: String) throws {
        try Self.checkDefaultKey(productId: productId, locale: locale)
        guard let messageId = try Self.object(body)["messageIdentifier"] as? String else { throw APIError.badRequest(4_000_000, "Invalid request.") }
        let id = try Self.identifier(messageId)
        try simulator.store.writer.write { db in
            guard let message = try Self.message(id, environment: environment, bid: bid, db: db) else { throw Self.messageNotFound }
            guard message["state"] as String == "APPROVED" else {
                throw APIError(status: .forbidden, code: 4_030_017, message: "Message not approved.")
            }
            let images = try AppStoreSimulator.imageStates(id, environment: environment, bundleId: bid, db: db)
            guard images.allSatisfy({ $0 == "APPROVED" }) else { throw APIError(status: .forbidden, code: 4_030_018, message: "Image not approved.") }
            try db.execute(
                sql: "INSERT OR REPLACE INTO simDefaultMessage (environment, bundleId, productId, locale, messageIdentifier) VALUES (?, ?, ?, ?, ?)",
                arguments: [environment.rawValue, bid, productId, locale, id])
        }
    }

    static func checkDefaultKey(productId: String, locale: String) throws {
        guard !productId.isEmpty, productId.utf8.count <= 200 else { throw APIError.badRequest(4_000_023, "Invalid product id.") }
        let parts = locale.split(separator: "-", omittingEmptySubsequences: false)
        guard (2...3).contains(parts[0].count), parts[0].allSatisfy({ $0.isASCII && $0.isLetter }),
            parts.dropFirst().allSatisfy({ (2...8).contains($0.count) && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) } })
        else { throw APIError.badRequest(4_000_164, "Invalid locale.") }
    }

    /// The default message of a product and locale (deleted with `delete`); 404 4040020 when none is configured.
    func defaultMessage(_ context: BasicRequestContext, environment: SimEnvironment, bid: String, delete: Bool) throws -> String {
        let productId = context.parameters.get("productId") ?? "", locale = context.parameters.get("locale") ?? ""
        try Self.checkDefaultKey(productId: productId, locale: locale)
        return try simulator.store.writer.write { db in
            let arguments: StatementArguments = [environment.rawValue, bid, productId, locale]
            guard
                let id = try String.fetchOne(
                    db,
                    sql: "SELECT messageIdentifier FROM simDefaultMessage WHERE environment = ? AND bundleId = ? AND productId = ? AND locale = ?",
                    arguments: arguments)
            else { throw APIError(status: .notFound, code: 4_040_020, message: "Default message not found.") }
            if delete {
                try db.execute(
                    sql: "DELETE FROM simDefaultMessage WHERE environment = ? AND bundleId = ? AND productId = ? AND locale = ?", arguments: arguments
                )
            }
            return id
        }
    }
}
